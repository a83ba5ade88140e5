//! The answer cache on the request path (`cache/` keeps the entries): for a model that opts in
//! (`cache_ttl_secs`), the prepared request is looked up by its fingerprint before admission (`look`); a
//! hit is admitted against the key's request rate only and replayed in the client's protocol, streamed or
//! not (`replay`); an answer from an upstream is stored after the attempts if it is complete (`store`).
//! Models that do not opt in pay nothing: their request is never decoded here.
//!
//! What the client says is honoured: `Cache-Control: no-store` neither reads nor writes, `no-cache` skips
//! the look-up and stores the fresh answer. What is never cached: requests with paid hosted tools or
//! service tiers, hosted tools another upstream would leave out, several choices, models with
//! `account_features` (their answers may live on in the upstream account), token counting, text completions;
//! answers that are errors, streams cut (by the upstream, the client, the output limit or shutdown), and
//! answers the upstream marked incomplete (stopped at the output limit, filtered, paused). Embeddings are
//! cached like answers: their vectors, keyed by the inputs and what shapes them (`fingerprint::of_embed`).

use std::borrow::Cow;
use std::time::Duration;

use super::events::EventWriter;
use super::outcome::{Answer, Delivered};
use super::prepared::Prepared;
use crate::cache::Entry;
use crate::config::CacheScope;
use crate::gateway::respond;
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::http::{Exchange, HttpRequest};
use crate::ledger::CacheUse;
use crate::protocol::canon::{Part, Request, Response, StopReason, StreamEvent, Usage};
use crate::protocol::egress::events_from_response;
use crate::protocol::fingerprint::{self, Fingerprint, Target};
use crate::protocol::ApiError;
use crate::util::unix_now;

/// The header every answer of a cached model carries: `hit`, `miss` or `bypass`.
pub(super) const HEADER: &str = "x-tollgate-cache";

/// Where an answer from an upstream is stored.
pub(super) struct Keep {
    fp: Fingerprint,
    ttl: Duration,
}

/// What the cache had for a request.
pub(super) enum Lookup {
    /// The model's answers are not cached (or the request counts tokens).
    Off,
    /// Found: the entry, and the client's request in canonical form (what its answer is encoded for).
    Hit {
        entry: Box<Entry>,
        req: Box<Request>,
    },
    /// Not answered from the cache (`used`: a miss, or a bypass); `keep`: where its answer is stored
    /// (None: nowhere).
    Fresh { used: CacheUse, keep: Option<Keep> },
}

impl Lookup {
    /// What the cache did, as the header, the record and the metrics say it.
    pub(super) fn used(&self) -> Option<CacheUse> {
        match self {
            Lookup::Off => None,
            Lookup::Hit { .. } => Some(CacheUse::Hit),
            Lookup::Fresh { used, .. } => Some(*used),
        }
    }

    pub(super) fn is_hit(&self) -> bool {
        matches!(self, Lookup::Hit { .. })
    }

    /// The answer from an upstream is to be stored.
    pub(super) fn keeps(&self) -> bool {
        matches!(self, Lookup::Fresh { keep: Some(_), .. })
    }
}

/// What the client's `Cache-Control` asks of the cache.
struct Directives {
    no_store: bool,
    no_cache: bool,
}

fn directives(req: &HttpRequest) -> Directives {
    let mut d = Directives {
        no_store: false,
        no_cache: false,
    };
    for v in req.header("cache-control").unwrap_or("").split(',') {
        let v = v.trim();
        d.no_store |= v.eq_ignore_ascii_case("no-store");
        d.no_cache |= v.eq_ignore_ascii_case("no-cache");
    }
    d
}

/// Looks the prepared request up, if its model's answers are cached.
pub(super) fn look(gw: &Gateway, ex: &Exchange, p: &Prepared) -> Lookup {
    let cached_endpoint = p.endpoint.generates() || p.endpoint.embeds();
    let Some(caching) = p.model.cache.filter(|_| cached_endpoint) else {
        return Lookup::Off;
    };
    let bypass = |keep| Lookup::Fresh {
        used: CacheUse::Bypass,
        keep,
    };
    let said = directives(&ex.request);
    if said.no_store {
        return bypass(None);
    }
    let passed_on = p
        .endpoint
        .protocol()
        .passed_on(&ex.request)
        .map(|(_, v)| sorted_values(&v))
        .unwrap_or_default();
    let Some((req, fp)) = fingerprint(p, caching.scope, &passed_on) else {
        return bypass(None);
    };
    let keep = Keep {
        fp,
        ttl: caching.ttl,
    };
    if said.no_cache {
        return bypass(Some(keep));
    }
    // An entry of the other endpoint's kind (no fingerprint makes one, but a store is shared) is a miss.
    let fits = |e: &Entry| {
        if p.endpoint.embeds() {
            e.vectors.is_some()
        } else {
            e.response.is_some()
        }
    };
    match gw.cache.get(&fp).filter(fits) {
        Some(entry) => Lookup::Hit {
            entry: Box::new(entry),
            req: Box::new(req),
        },
        None => Lookup::Fresh {
            used: CacheUse::Miss,
            keep: Some(keep),
        },
    }
}

/// Whether an answer holds a real secret (one the client got `[redacted]` in its place): never kept, so
/// no store holds it and no replay depends on the secret still being known then (a rotated credential is
/// not).
fn holds_secret(resp: &Response) -> bool {
    let found = |t: &str| matches!(crate::secrets::redact(t.as_bytes()), Cow::Owned(_));
    resp.content.iter().any(|p| match p {
        Part::Text(t) => found(t),
        Part::Reasoning { text, .. } => found(text),
        Part::ToolCall {
            name, arguments, ..
        } => found(name) || found(arguments),
        Part::Image(_) | Part::ToolResult { .. } => false,
    })
}

/// A header's comma-separated values, trimmed, in lower case, sorted and each once.
fn sorted_values(v: &str) -> String {
    let mut all: Vec<String> = v
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    all.sort();
    all.dedup();
    all.join(",")
}

/// The request in canonical form and its fingerprint, if it is one the cache keeps.
fn fingerprint(p: &Prepared, scope: CacheScope, passed_on: &str) -> Option<(Request, Fingerprint)> {
    let protocol = p.endpoint.protocol();
    let scope = match scope {
        CacheScope::Key => format!("key:{}", p.identity.name),
        CacheScope::Group => format!("group:{}", p.identity.group),
        CacheScope::All => "all".to_string(),
    };
    let target = Target {
        model: &p.model.name,
        upstream_model: &p.upstream_model,
        scope: &scope,
        limit: p.limit_for_upstream(),
        passed_on,
    };
    if p.endpoint.embeds() {
        // The vectors are written from the entry for the client's own request (`replay_vectors`): no
        // canonical generation request goes with them.
        let req = p.embed.as_ref().filter(|_| !p.model.account_features)?;
        return Some((Request::default(), fingerprint::of_embed(req, &target)));
    }
    if !p.asked.hosted.is_empty()
        || p.model.account_features
        || p.choices != 1
        || protocol.request.asks_beyond_canon(&p.body)
    {
        return None;
    }
    let req = p.canonical().ok()?;
    if !req.dropped_tools.is_empty() {
        return None;
    }
    let fp = fingerprint::of(protocol, &p.body, &req, &target);
    Some((req, fp))
}

/// Answers from the cache: the entry in the client's protocol, as a stream if it asked for one, with a
/// fresh id, the model name it asked for and the entry's usage.
pub(super) fn replay(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    p: &Prepared,
    entry: &Entry,
    req: &Request,
) -> Answer {
    let protocol = trace.protocol;
    let Some(mut resp) = entry.response.clone() else {
        return replay_vectors(ex, trace, p, entry);
    };
    resp.id = protocol.new_response_id();
    resp.model = p.requested.clone();
    resp.created = unix_now();
    let mut answer = Answer::for_upstream(&entry.upstream);
    answer.answered(200);
    answer.reported(Some(resp.usage));
    if p.stream {
        let watch = gw
            .watchdog
            .watch(&trace.request_id, ex.response().socket(), trace.cut.clone());
        let encoder = protocol
            .reply
            .stream_encoder(req, p.wants_stream_usage, &trace.request_id);
        let start = StreamEvent::Start {
            id: resp.id.clone(),
            model: resp.model.clone(),
            created: resp.created,
            input_tokens: resp.usage.input_tokens,
        };
        let delivered = match EventWriter::start(ex.response(), trace, encoder, start, &[], &watch)
        {
            Ok(writer) => stream(writer, &resp),
            Err(_) => Delivered {
                client_closed: true,
                ..Delivered::default()
            },
        };
        answer.delivered(delivered);
        return answer;
    }
    match serde_json::to_vec(&protocol.reply.encode_response(&resp, req)) {
        Ok(body) => {
            respond::json(ex.response(), trace, 200, &body, &[]);
            answer
        }
        Err(e) => answer.failed(ApiError::internal(e.to_string())),
    }
}

/// Answers an embeddings request from the cache: the entry's vectors in the client's shape (and encoding),
/// with the input tokens its first request was recorded with.
fn replay_vectors(ex: &mut Exchange, trace: &Trace, p: &Prepared, entry: &Entry) -> Answer {
    let mut answer = Answer::for_upstream(&entry.upstream);
    let embedder = p.endpoint.protocol().embedder;
    let (Some(got), Some(req), Some(embedder)) =
        (entry.vectors.as_ref(), p.embed.as_ref(), embedder)
    else {
        return answer.failed(ApiError::internal(
            "a cache entry that does not fit its request",
        ));
    };
    let tokens = got.input_tokens.unwrap_or_else(|| p.input_estimate());
    answer.answered(200);
    answer.reported(Some(Usage {
        input_tokens: tokens,
        ..Usage::default()
    }));
    match serde_json::to_vec(&embedder.encode_embeddings(got, req, &p.requested, tokens)) {
        Ok(body) => {
            respond::json(ex.response(), trace, 200, &body, &[]);
            answer
        }
        Err(e) => answer.failed(ApiError::internal(e.to_string())),
    }
}

/// The entry's events, in the order the client protocol's encoder gives them, usage and end included.
fn stream(mut writer: EventWriter, resp: &Response) -> Delivered {
    for ev in events_from_response(resp) {
        if writer.emit(&ev).is_err() {
            return writer.gone();
        }
    }
    writer.end()
}

/// After the attempts: stores the answer from the upstream if the request's answers are stored and it is
/// complete (delivered whole with no error, and not marked incomplete by the upstream), with the usage its
/// request is recorded with. Returns the answer (without the canonical copy it kept).
pub(super) fn store(
    gw: &Gateway,
    p: &Prepared,
    trace: &Trace,
    lookup: &Lookup,
    mut answer: Answer,
) -> Answer {
    let kept = answer.take_kept();
    let vectors = answer.take_kept_vectors();
    let Lookup::Fresh {
        keep: Some(keep), ..
    } = lookup
    else {
        return answer;
    };
    let whole = answer.status() == 200
        && answer.error().is_none()
        && !answer.client_closed()
        && !trace.client_gone()
        && !trace.cut_by_shutdown();
    if let Some(mut vectors) = vectors.filter(|v| whole && !v.vectors.is_empty()) {
        // The usage its request is recorded with (an estimate where the upstream reports none).
        vectors.input_tokens = answer
            .usage()
            .map(|u| u.input_tokens)
            .or(vectors.input_tokens);
        let entry = Entry {
            response: None,
            vectors: Some(*vectors),
            upstream: answer.upstream().unwrap_or_default().to_string(),
        };
        gw.cache.put(&p.model.name, keep.fp, &entry, keep.ttl);
        return answer;
    }
    let Some(mut kept) = kept else {
        return answer;
    };
    let finished = matches!(
        kept.stop,
        StopReason::EndTurn | StopReason::StopSequence(_) | StopReason::ToolUse
    );
    if whole && finished && !kept.unkept && !holds_secret(&kept) {
        // The replay gives its own id, name and time.
        (kept.id, kept.model, kept.created) = (String::new(), String::new(), 0);
        kept.usage = answer.usage().unwrap_or(kept.usage);
        let entry = Entry {
            response: Some(*kept),
            vectors: None,
            upstream: answer.upstream().unwrap_or_default().to_string(),
        };
        gw.cache.put(&p.model.name, keep.fp, &entry, keep.ttl);
    }
    answer
}
