//! tollgate: a text-generation gateway for OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and
//! Gemini API clients, in front of upstreams of any of those kinds. See ARCHITECTURE.md for the map.

pub mod access;
pub(crate) mod addresses;
pub(crate) mod audit;
pub(crate) mod budget;
pub mod cache;
pub mod cli;
pub mod config;
pub(crate) mod console;
pub(crate) mod doctor;
pub(crate) mod gateway;
pub mod http;
pub mod ledger;
pub mod logging;
pub mod money;
pub(crate) mod peer;
pub(crate) mod pricing;
pub mod protocol;
pub mod secrets;
pub mod server;
pub mod standing;
pub mod store;
pub mod upstream;
pub mod util;
