//! Maps method and path to a handler; unknown paths get a 404 that explains the usual base-URL mistakes.

use std::net::IpAddr;

use serde_json::json;

use super::generate;
use crate::access;
use crate::gateway::metrics::scrape::scrape;
use crate::gateway::respond;
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::http::{Exchange, HttpRequest};
use crate::protocol::codec::Listed;
use crate::protocol::request::Endpoint;
use crate::protocol::{ApiError, Protocol, ALL};

/// Handles one exchange from start to finish.
pub(super) fn route(gw: &Gateway, ex: &mut Exchange) {
    let method = ex.request.method.clone();
    let path = ex.request.path.clone();
    if let Some(endpoint) = Endpoint::from_path(&path) {
        if method == "POST" {
            generate::handle(gw, ex, endpoint);
        } else {
            let trace = Trace::new(ex, endpoint.protocol());
            let e = method_not_allowed(&path, &method, "POST");
            respond::error_with(ex.response(), &trace, &e, &[("allow", "POST")]);
        }
        return;
    }
    // A protocol's SDK (it sends a header only that SDK sends) gets its protocol's shapes, the models list's
    // included.
    let shape = Protocol::for_request(&ex.request);
    let trace = Trace::new(ex, shape);
    match (method.as_str(), path.as_str()) {
        (_, p) if p.starts_with("/admin/") => crate::console::handle(gw, ex, &trace),
        ("GET" | "HEAD", p) if p == "/console" || p.starts_with("/console/") => {
            if !crate::console::serve_ui(ex) {
                respond::error(ex.response(), &trace, &not_found(&path));
            }
        }
        ("GET" | "HEAD", "/healthz") => {
            respond::json(ex.response(), &trace, 200, br#"{"status":"ok"}"#, &[]);
        }
        ("GET" | "HEAD", "/readyz") => {
            let (ready, body) = readiness(gw);
            respond::json(
                ex.response(),
                &trace,
                if ready { 200 } else { 503 },
                body.to_string().as_bytes(),
                &[],
            );
        }
        ("GET" | "HEAD", "/metrics") => {
            if gw.config().metrics_auth {
                if let Err(e) = crate::console::authorize(gw, ex) {
                    return respond::error(ex.response(), &trace, &e);
                }
            }
            // Without a token, the upstreams' labels name no address.
            let mut text = scrape(gw);
            if !gw.config().metrics_auth {
                text = crate::addresses::hide(&text).into_owned();
            }
            let headers =
                trace.headers(&[("content-type", "text/plain; version=0.0.4; charset=utf-8")]);
            let _ = ex.response().send(200, &headers, text.as_bytes());
        }
        ("GET" | "HEAD", p) if models_list(p).is_some() => match models_list(p).flatten() {
            None => models(gw, ex, &trace, None),
            Some(Ok(id)) => models(gw, ex, &trace, Some(id)),
            Some(Err(m)) => respond::error(
                ex.response(),
                &trace,
                &ApiError::invalid_param("model", m.to_string()),
            ),
        },
        (_, p) if matches!(models_list(p), Some(None)) => {
            let e = method_not_allowed(&path, &method, "GET");
            respond::error_with(ex.response(), &trace, &e, &[("allow", "GET")]);
        }
        (_, "/healthz" | "/readyz" | "/metrics") => {
            let e = method_not_allowed(&path, &method, "GET");
            respond::error_with(ex.response(), &trace, &e, &[("allow", "GET")]);
        }
        _ => respond::error(ex.response(), &trace, &not_found(&path)),
    }
}

/// Whether `path` is a models list (`/v1/models`, or a protocol's own: `models_list_path`): `Some(None)` for
/// the list, `Some(Some(id))` for one model of it (percent-decoded), None for another path. Under a
/// protocol's own list a name has no `/` (but the `models/` its clients may put before it).
fn models_list(path: &str) -> Option<Option<Result<String, crate::http::SegmentError>>> {
    let own = ALL.iter().filter_map(|p| p.models_list_path);
    for (i, list) in std::iter::once("/v1/models").chain(own).enumerate() {
        match path.strip_prefix(list) {
            Some("") => return Some(None),
            Some(rest) => {
                let id = rest.strip_prefix('/').filter(|id| !id.is_empty());
                let nested = |id: &str| id.strip_prefix("models/").unwrap_or(id).contains('/');
                if let Some(id) = id.filter(|id| i == 0 || !nested(id)) {
                    return Some(Some(crate::http::decode_path_segment(id)));
                }
            }
            None => {}
        }
    }
    None
}

/// 405 for a path that takes only `allowed`.
fn method_not_allowed(path: &str, method: &str, allowed: &str) -> ApiError {
    ApiError::new(
        405,
        crate::protocol::ErrorKind::MethodNotAllowed,
        format!("{path} only accepts {allowed} (got {method})."),
    )
}

/// What a request is refused with from its head when it carries a body: every path but the models' and the
/// admin API's takes none, and a body is read only for a caller who may send one. Its answer is the one the
/// path gives the head alone when that is an error (401, 404, 405); otherwise 400. `None`: the body may be
/// read. (Called by the head screen, `screen.rs`, before anything of the body is read or reserved.)
pub(super) fn refuse_body(
    gw: &Gateway,
    req: &HttpRequest,
    peer: IpAddr,
) -> Option<(ApiError, Option<&'static str>)> {
    let (path, method) = (req.path.as_str(), req.method.as_str());
    if let Some(endpoint) = Endpoint::from_path(path) {
        if method != "POST" {
            return Some((method_not_allowed(path, method, "POST"), Some("POST")));
        }
        let e = access::authenticate(req, endpoint.protocol(), &gw.keys).err()?;
        return Some((e, None));
    }
    if path.starts_with("/admin/") {
        let e = crate::console::authorize_head(gw, req, peer).err()?;
        return Some((e, None));
    }
    let models = models_list(path).is_some();
    let credentials = if models {
        access::authenticate(req, Protocol::for_request(req), &gw.keys).err()
    } else if path == "/metrics" && gw.config().metrics_auth {
        crate::console::authorize_head(gw, req, peer).err()
    } else {
        None
    };
    if let Some(e) = credentials {
        return Some((e, None));
    }
    let get = matches!(method, "GET" | "HEAD");
    let console = path == "/console" || path.starts_with("/console/");
    if !(models || console || matches!(path, "/healthz" | "/readyz" | "/metrics"))
        || (console && !get)
    {
        return Some((not_found(path), None));
    }
    if !get {
        return Some((method_not_allowed(path, method, "GET"), Some("GET")));
    }
    let e = ApiError::invalid(format!("{method} {path} takes no request body."))
        .with_cause(crate::protocol::Cause::UnexpectedBody);
    Some((e, None))
}

/// `/readyz`: ready unless draining, the ledger is failing, or (with a store) the store lost its data or
/// does not answer (with `on_unavailable = "local"` an unanswering store does not stop admission, so it does
/// not stop readiness either). Free space on the data disk under `min_free_disk_mb` is a detail (`disk`),
/// not a reason to be unready.
fn readiness(gw: &Gateway) -> (bool, serde_json::Value) {
    let draining = gw
        .state
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst);
    let ledger = gw.ledger.healthy();
    let store = gw.store.as_ref().map(|s| {
        let answers = s.healthy();
        let local = s.settings().on_unavailable == crate::config::store::OnUnavailable::Local;
        let state = match (s.lost(), answers) {
            (true, _) => "lost its data",
            (false, true) => "answers",
            (false, false) => "not answering",
        };
        // Unauthenticated: where the store is stays in the log and the console.
        let error = if answers { None } else { s.last_error() };
        let error = error.map(|e| crate::addresses::hide(&e).into_owned());
        (
            !s.lost() && (answers || local),
            json!({"state": state, "error": error}),
        )
    });
    let ready = !draining && ledger && store.as_ref().is_none_or(|(ok, _)| *ok);
    // Low free space is a warning ahead of a full disk: still ready, with the detail.
    let files = gw.ledger.stats();
    let disk = json!({"free_mb": files.free_bytes.map(|b| b / crate::ledger::options::MB),
                      "min_free_mb": files.min_free_bytes / crate::ledger::options::MB,
                      "low": files.low_disk, "warning": files.disk_warning()});
    let body = json!({"status": if ready { "ready" } else { "not ready" }, "config": "loaded",
                      "ledger": if ledger { "writable" } else { "failing" },
                      "ledger_error": gw.ledger.problem(), "draining": draining,
                      "disk": disk, "store": store.map(|(_, s)| s)});
    (ready, body)
}

/// 404 with a hint for the classic base-URL mistakes.
pub(super) fn not_found(path: &str) -> ApiError {
    let msg = match path_hint(path) {
        Some(h) => format!("Unknown path `{path}`. {h}"),
        None => format!(
            "Unknown path `{path}`. This gateway serves: {}.",
            endpoints()
        ),
    };
    ApiError::not_found(msg).with_cause(crate::protocol::Cause::UnknownPath)
}

/// What the gateway serves, for a 404: every protocol's endpoints, the models list, the console, the
/// operator's paths.
fn endpoints() -> String {
    let mut list: Vec<String> = Vec::new();
    for p in ALL {
        list.push(format!("POST {}", p.path));
        list.extend(p.count_tokens_path.map(|c| format!("POST {c}")));
        list.extend(p.embed_path.map(|c| format!("POST {c}")));
        list.extend(p.complete_path.map(|c| format!("POST {c}")));
    }
    let lists: Vec<String> = std::iter::once("/v1/models")
        .chain(ALL.iter().filter_map(|p| p.models_list_path))
        .map(|l| format!("GET {l}"))
        .collect();
    format!(
        "{} and {} for clients; the operator console at /console; GET /healthz, /readyz and /metrics",
        list.join(", "),
        lists.join(", ")
    )
}

fn path_hint(path: &str) -> Option<String> {
    if let Some(hint) = ALL.iter().find_map(|p| p.path_hint(path)) {
        return Some(hint);
    }
    if path.contains("/v1/v1/") {
        let fixed = path.replacen("/v1/v1/", "/v1/", 1);
        // Whose endpoint follows says whose client it is.
        let family = ALL.iter().find(|p| fixed.ends_with(p.path));
        let said = match family {
            Some(p) if !p.base_url_has_v1 => format!(
                "{} clients take the base URL `http://<host>` without `/v1`: they add `{}` themselves.",
                p.title,
                p.sdk_path()
            ),
            Some(p) => format!(
                "{} clients take the base URL `http://<host>/v1` (one `/v1`): they add `{}` themselves.",
                p.title,
                p.sdk_path()
            ),
            None => "OpenAI clients (Chat Completions, Responses) take the base URL `http://<host>/v1`; Anthropic \
                     clients take `http://<host>` without `/v1`, because they add `/v1/messages` themselves."
                .to_string(),
        };
        return Some(format!(
            "The path has a doubled `/v1` (did you mean `{fixed}`?). {said}"
        ));
    }
    // A base URL holding a full endpoint: the endpoint the client appended (at the end) names its family; one
    // inside (at the start) only when none ends the path.
    let inside = |p: &&crate::protocol::Protocol| {
        let ep = p.path;
        path.len() > ep.len() && path.ends_with(ep)
    };
    let started = |p: &&crate::protocol::Protocol| {
        let ep = p.path;
        let short = ep.strip_prefix("/v1").unwrap_or(ep);
        path.len() > ep.len() && (path.starts_with(ep) || path.ends_with(short))
    };
    if let Some(p) = ALL.iter().find(inside).or_else(|| ALL.iter().find(started)) {
        let ep = p.path;
        let base = if p.base_url_has_v1 {
            "`http://<host>/v1` (no endpoint path)"
        } else {
            "`http://<host>` (no `/v1`, no endpoint)"
        };
        return Some(format!(
            "The path has the endpoint `{ep}` inside it: the client was given a base URL that already contains a \
             full endpoint path and appended its own. The endpoint meant is `POST {ep}`. Set the client's base URL \
             to {base}; the client appends `{}` itself.",
            p.sdk_path()
        ));
    }
    for p in ALL {
        let ep = p.path;
        let short = ep.strip_prefix("/v1").unwrap_or(ep);
        if path == short {
            return Some(format!(
                "The path is missing `/v1`: use `{ep}`. OpenAI clients need the base URL `http://<host>/v1`."
            ));
        }
    }
    if path == "/models" {
        return Some("The path is missing `/v1`: use `/v1/models`.".into());
    }
    None
}

/// `GET /v1/models` and `GET /v1/models/{id}` (and a protocol's own list path): the names and aliases the key's group may use, in the shape of
/// the trace's protocol.
fn models(gw: &Gateway, ex: &mut Exchange, trace: &Trace, id: Option<String>) {
    let protocol = trace.protocol;
    let identity = match access::authenticate(&ex.request, protocol, &gw.keys) {
        Ok(i) => i,
        Err(e) => return respond::error(ex.response(), trace, &e),
    };
    let config = gw.config();
    // Names and aliases the group may use (patterns cannot be listed), in config order. A discovered model
    // whose id a configured name already serves is named after its server's address (`id@host:port`): not
    // listed, so no address reaches a tenant (the configured name is listed).
    let visible: Vec<(&str, String, u64, bool)> = config
        .models
        .iter()
        .filter(|m| !m.disabled && !crate::config::names::is_pattern(&m.name))
        .filter(|m| m.discovered.is_none() || m.name == m.upstream_model)
        .filter(|m| access::group_allows(&config, &identity.group, &m.name, &m.name))
        .flat_map(|m| {
            let owner = owned_by(m);
            let embeds = embeds(&config, m);
            std::iter::once(m.name.as_str())
                .chain(m.aliases.iter().map(String::as_str))
                .map(move |n| (n, owner.clone(), m.max_output_tokens, embeds))
        })
        .collect();
    let listed: Vec<Listed> = visible
        .iter()
        .map(|(id, owner, max_output, embeds)| Listed {
            id,
            owned_by: owner,
            max_output: *max_output,
            embeds: *embeds,
        })
        .collect();
    let created = gw.started_unix;
    let body = match id {
        // A collection prefix some clients put before a name (`models/`) is accepted.
        Some(id) => match listed
            .iter()
            .find(|m| m.id == id || id.strip_prefix("models/") == Some(m.id))
        {
            Some(m) => protocol.list.model_entry(m, created),
            None => return respond::error(ex.response(), trace, &ApiError::model_not_found(&id)),
        },
        None => protocol.list.models_list(&listed, created),
    };
    respond::json(ex.response(), trace, 200, body.to_string().as_bytes(), &[]);
}

/// `owned_by` of a model in the list: its first upstream's name, `local` for a server discovery found (whose
/// upstream is named after its address), and never an address (`addresses::hide`).
/// Whether one of the model's upstreams answers embeddings (the mock does; an upstream whose vendor has
/// none does not).
fn embeds(config: &crate::config::Config, m: &crate::config::Model) -> bool {
    m.upstreams
        .iter()
        .filter_map(|u| config.upstream(u))
        .any(|u| u.kind.protocol().is_none_or(|p| p.embedder.is_some()))
}

fn owned_by(m: &crate::config::Model) -> String {
    if m.discovered.is_some() {
        return "local".into();
    }
    let name = m.upstreams.first().map_or("", String::as_str);
    crate::addresses::hide(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_for_classic_mistakes() {
        assert!(path_hint("/v1/v1/chat/completions")
            .unwrap()
            .contains("doubled"));
        let hint = path_hint("/v1/chat/completions/chat/completions").unwrap();
        assert!(hint.contains("full endpoint"), "{hint}");
        assert!(
            hint.contains("The endpoint meant is `POST /v1/chat/completions`"),
            "{hint}"
        );
        assert!(path_hint("/v1/messages/v1/messages")
            .unwrap()
            .contains("full endpoint"));
        assert!(path_hint("/chat/completions")
            .unwrap()
            .contains("missing `/v1`"));
        assert!(path_hint("/v1/unknown").is_none());
    }

    /// Issue 40: each client family is told its own base URL: an Anthropic client given an OpenAI endpoint
    /// as its base URL, or `/v1`; a Gemini client given `/v1`.
    #[test]
    fn each_family_gets_its_own_hint() {
        let hint = path_hint("/v1/chat/completions/v1/messages").unwrap();
        assert!(
            hint.contains("`POST /v1/messages`") && hint.contains("`http://<host>` (no `/v1`"),
            "{hint}"
        );
        let hint = path_hint("/v1/v1/messages").unwrap();
        assert!(
            hint.contains("without `/v1`") && hint.contains("/v1/messages"),
            "{hint}"
        );
        let hint = path_hint("/v1/v1/responses").unwrap();
        assert!(hint.contains("`http://<host>/v1` (one `/v1`)"), "{hint}");
        let hint = path_hint("/v1/v1beta/models/gemini-2.5-flash:generateContent").unwrap();
        assert!(
            hint.contains("without a version") && hint.contains("/v1beta/models/gemini"),
            "{hint}"
        );
    }
}
