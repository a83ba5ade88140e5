//! tollgate: a text-generation gateway for OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and
//! Gemini API clients, in front of upstreams of any of those kinds. See ARCHITECTURE.md for the map.

pub mod access;
pub mod addresses;
pub mod audit;
pub mod budget;
pub mod cache;
pub mod cli;
pub mod config;
pub mod console;
pub mod doctor;
pub mod gateway;
pub mod http;
pub mod ledger;
pub mod logging;
pub mod money;
pub mod peer;
pub mod pricing;
pub mod protocol;
pub mod secrets;
pub mod server;
pub mod standing;
pub mod store;
pub mod upstream;
pub mod util;
