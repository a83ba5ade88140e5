//! What the ledger holds: one [`Record`] per request (the fields of its JSON line, the [`Status`] it ended
//! with, what the answer cache did for it), and the [`RecordFacts`] of a record that the store counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::money::Money;

/// The status a request ended with: the HTTP status the client got, `client_closed` when the client went
/// away before the answer was complete, or `shutdown` when the server's shutdown deadline cut it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The HTTP status the client got.
    Http(u16),
    /// The client went away before the answer was complete (`client_closed`).
    ClientClosed,
    /// The server's shutdown deadline cut the request (`shutdown`).
    Shutdown,
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Status::Http(c) => s.serialize_u16(*c),
            Status::ClientClosed => s.serialize_str("client_closed"),
            Status::Shutdown => s.serialize_str("shutdown"),
        }
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Code(u16),
            Text(String),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Code(c) => Status::Http(c),
            Raw::Text(t) if t == "client_closed" => Status::ClientClosed,
            Raw::Text(t) if t == "shutdown" => Status::Shutdown,
            Raw::Text(t) => Status::Http(t.parse().unwrap_or(0)),
        })
    }
}

/// One request's usage record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// When the request arrived (RFC 3339, UTC, milliseconds).
    pub ts: String,
    /// The gateway's id for the request (`req_…`), sent to the client in `x-request-id`.
    pub request_id: String,
    /// The client's `X-Client-Request-ID`, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// The name of the key the request came with (never the key itself).
    pub key: String,
    /// The key's group.
    pub group: String,
    /// The model entry that served (or, refused before one was found, the name asked for).
    pub model: String,
    /// The client's protocol, by its short name (`chat`, `responses`, `messages`, `gemini`).
    pub protocol: String,
    /// The upstream that answered; empty (`null` in the file) for a request the gateway refused itself.
    #[serde(serialize_with = "upstream_out", deserialize_with = "upstream_in")]
    pub upstream: String,
    /// The endpoint, where it is not generation: `embeddings`, `count_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The client asked for a streamed answer.
    pub stream: bool,
    /// How the request ended: the HTTP status, `client_closed` or `shutdown`.
    pub status: Status,
    /// All input: uncached, cache reads and cache writes.
    pub input_tokens: u64,
    /// The input read from a cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// The input written to a cache for five minutes (or for a lifetime the upstream did not state).
    #[serde(default)]
    pub cache_write_5m_tokens: u64,
    /// The input written to a cache for an hour.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
    /// All output, reasoning included.
    pub output_tokens: u64,
    /// The output that was reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// The long-context tier the request was billed at (its `above_input_tokens`); none: the base prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_above_input_tokens: Option<u64>,
    /// Tokens were estimated from the text because the upstream reported none.
    #[serde(default)]
    pub estimated: bool,
    /// Credits charged.
    pub cost: Money,
    /// Milliseconds from the request's arrival until it was settled, at the end of its answer.
    pub latency_ms: u64,
    /// The error the request ended with (an upstream's, a stream that broke, the gateway's refusal), as the
    /// operator reads it, secrets scrubbed; absent when it ended without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The model name the client asked for, when it is not the serving entry's `model` (an alias, or a
    /// name a pattern matched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,
    /// Why the gateway refused the request itself (no upstream was called): `model_not_allowed`,
    /// `model_not_found`, `rate_limited`, `insufficient_quota`, `upstream_unavailable`, `invalid_request`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The instance that served the request (with a `[store]`, or when `instance` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Uses of paid hosted tools billed, per tool family (`web_search`: 3); their cost is in `cost`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosted_uses: BTreeMap<String, u64>,
    /// The paid service tier billed (`priority`); its price is in `cost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// A field that raised the rate of every token (`inference_geo=us`); its multiplier is in `cost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surcharge: Option<String>,
    /// A request to a model whose answers are cached: `hit` (answered from the cache, at no cost), `miss`
    /// or `bypass` (not looked up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheUse>,
}

/// What the answer cache did for a request (`Record::cache`, the `x-tollgate-cache` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheUse {
    /// Answered from the cache.
    Hit,
    /// Looked up and not found (or the shared store did not answer): answered by an upstream.
    Miss,
    /// Not looked up: the client said `no-store` or `no-cache`, or the request is not one the cache keeps.
    Bypass,
}

impl CacheUse {
    /// Its name in the record and the `x-tollgate-cache` header: `hit`, `miss` or `bypass`.
    pub fn name(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Bypass => "bypass",
        }
    }
}

fn upstream_out<S: serde::Serializer>(u: &str, s: S) -> Result<S::Ok, S::Error> {
    if u.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(u)
    }
}

fn upstream_in<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// The fields of a record that the store counts.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordFacts {
    /// The key's name ([`Record::key`]).
    pub key: String,
    /// The request's id ([`Record::request_id`]).
    pub request_id: String,
    /// The cost as written in the line (a JSON number: what reading it gives back).
    pub cost: Money,
    /// Input and output tokens.
    pub tokens: u64,
    /// When the request arrived ([`Record::ts`]).
    pub ts: String,
}

impl RecordFacts {
    /// The facts of `rec` as its line gives them back (None: its cost has no JSON number). The cost is the
    /// number as written, read back by the same parser a reader of the line uses (so it is the same to the
    /// unit however that parser rounds).
    pub fn of(rec: &Record) -> Option<RecordFacts> {
        let written = serde_json::to_string(&rec.cost).ok()?;
        Some(RecordFacts {
            key: rec.key.clone(),
            request_id: rec.request_id.clone(),
            cost: serde_json::from_str(&written).ok()?,
            tokens: rec.input_tokens.saturating_add(rec.output_tokens),
            ts: rec.ts.clone(),
        })
    }
}
