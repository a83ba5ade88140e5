//! Upstreams: real ones over HTTP (`http`) and the built-in mock model (`mock`).

pub mod breaker;
pub mod http;
pub mod mock;
pub mod tap;
