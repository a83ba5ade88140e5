//! Upstreams: real ones over HTTP (`http`), the built-in mock model (`mock`), their breakers (`breaker`),
//! how a model's upstream is chosen (`routing`), and the one failover policy (`policy`).

pub(crate) mod breaker;
pub(crate) mod discovery;
pub mod http;
pub(crate) mod mock;
pub(crate) mod policy;
pub mod routing;
pub(crate) mod tap;
