//! Upstreams: real ones over HTTP (`http`), the built-in mock model (`mock`), their breakers (`breaker`)
//! and how a model's upstream is chosen (`routing`).

pub mod breaker;
pub mod discovery;
pub mod http;
pub mod mock;
pub mod routing;
pub mod tap;
