//! Upstreams: real ones over HTTP (`http`), the built-in mock model (`mock`), their breakers (`breaker`),
//! how a model's upstream is chosen (`routing`), and the one failover policy (`policy`).

pub mod breaker;
pub mod discovery;
pub mod http;
pub mod mock;
pub mod policy;
pub mod routing;
pub mod tap;
