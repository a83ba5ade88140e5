//! The operator console: the admin JSON API (`/admin/...`, for the console and for scripts) and the web UI
//! at `/console` (static files embedded in the binary; they hold no data). Every admin call needs the admin
//! token (`Authorization: Bearer <token>`, compared in constant time); with no token configured the API
//! refuses every call.

mod assets;
mod manage;
mod models;
pub(crate) mod usage;

use std::net::IpAddr;

use serde_json::{json, Value};

use crate::access::{constant_time_eq, token_digest};
use crate::audit::Action;
use crate::gateway::respond;
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::http::{Exchange, HttpRequest};
use crate::protocol::{ApiError, Cause, ErrorKind};

pub(crate) use assets::serve as serve_ui;

/// Checks the admin token (also for `/metrics` with `metrics_auth`).
pub(crate) fn authorize(gw: &Gateway, ex: &Exchange) -> Result<(), ApiError> {
    authorize_head(gw, &ex.request, ex.peer.ip())
}

/// Checks the admin token of a request from `addr` (its head is enough: the head screen asks before a body
/// is read), held off while the address is guessing.
pub(crate) fn authorize_head(
    gw: &Gateway,
    request: &HttpRequest,
    addr: IpAddr,
) -> Result<(), ApiError> {
    let Some(expected) = &gw.admin_token.digest() else {
        let how = if gw.admin_token.configured() {
            "Make one with `tollgate admin-token rotate` (no restart needed).".to_string()
        } else {
            format!(
                "Set the environment variable {} to a secret and restart tollgate.",
                gw.config().admin_token_env
            )
        };
        return Err(ApiError::new(
            403,
            ErrorKind::Permission,
            format!("The admin API is disabled: no admin token is configured. {how}"),
        )
        .with_cause(Cause::AdminDisabled));
    };
    let presented = request
        .header("authorization")
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .unwrap_or("");
    let now = std::time::Instant::now();
    if let Some(wait) = gw.admin_guard.held(addr, now) {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        return Err(ApiError::new(
            429,
            ErrorKind::RateLimit,
            format!(
                "Too many wrong admin tokens from this address; admin requests from it are held off for {secs} s."
            ),
        )
        .with_cause(Cause::AdminAuthThrottled)
        .with_retry_after(secs));
    }
    if presented.is_empty() || !constant_time_eq(&token_digest(presented), expected) {
        gw.admin_guard.failed(addr, now);
        return Err(ApiError::unauthorized(
            "Missing or wrong admin token (send `Authorization: Bearer <admin token>`).",
        )
        .with_cause(Cause::InvalidAdminToken));
    }
    gw.admin_guard.succeeded(addr);
    Ok(())
}

/// Handles `/admin/...`.
pub(crate) fn handle(gw: &Gateway, ex: &mut Exchange, trace: &Trace) {
    let result = authorize(gw, ex).and_then(|()| audited(gw, ex, trace));
    match result {
        Ok(AdminReply::Json(v)) => respond::json(
            ex.response(),
            trace,
            200,
            v.to_string().as_bytes(),
            &[("cache-control", "no-store")],
        ),
        Ok(AdminReply::Csv(body)) => {
            let headers = trace.headers(&[
                ("content-type", "text/csv; charset=utf-8"),
                (
                    "content-disposition",
                    "attachment; filename=\"tollgate-usage.csv\"",
                ),
                ("cache-control", "no-store"),
            ]);
            let _ = ex.response().send(200, &headers, body.as_bytes());
        }
        Err(e) => respond::error(ex.response(), trace, &e),
    }
}

/// What an admin call answers.
pub(crate) enum AdminReply {
    Json(Value),
    Csv(String),
}

/// Runs an admin call; a change that succeeded is appended to the audit trail with its state before and
/// after. The audit file is opened before the change: a change it could not record is refused (503).
fn audited(gw: &Gateway, ex: &Exchange, trace: &Trace) -> Result<AdminReply, ApiError> {
    let change = audit_target(ex);
    let trail = match change {
        Some(_) => Some(
            crate::audit::Trail::open(&gw.config().data_dir).map_err(|e| {
                ApiError::new(
                    503,
                    ErrorKind::Unavailable,
                    format!("The change was not made: its audit entry cannot be written. {e}"),
                )
                .with_cause(Cause::AuditUnavailable)
            })?,
        ),
        None => None,
    };
    let before = change.as_ref().map(|(kind, name)| state_of(gw, kind, name));
    let answer = route(gw, ex)?;
    if let (Some((kind, name)), Some(trail), AdminReply::Json(v)) = (change, trail, &answer) {
        // A new key or group is named in the answer.
        let name = name.or_else(|| v["name"].as_str().map(str::to_string));
        if let Some(name) = name {
            let after = state_of(gw, kind, &Some(name.clone()));
            let before = before.unwrap_or(Value::Null);
            let action = action_of(&ex.request.method, kind, &ex.request.path, &before, &after);
            let mut entry = crate::audit::AuditEntry::new(
                crate::audit::ACTOR_ADMIN,
                action,
                format!("{kind} {name}"),
                before,
                after,
            );
            entry.request_id = Some(trace.request_id.clone());
            trail.write(&entry);
            if let Some(store) = &gw.store {
                if let Ok(json) = serde_json::to_string(&entry) {
                    if let Err(e) = store.audit_push(&json) {
                        log::warn!("store: the audit entry stays in this instance's audit.jsonl only ({e})");
                    }
                }
            }
        }
    }
    Ok(answer)
}

/// The kind and (when in the path) the name of what an admin call changes; None for reads.
fn audit_target(ex: &Exchange) -> Option<(&'static str, Option<String>)> {
    if ex.request.method == "GET" || ex.request.method == "HEAD" {
        return None;
    }
    // As `route` reads the path: a trailing `/` names nothing (`POST /admin/keys/` creates a key, named
    // in the answer).
    let rest = ex
        .request
        .path
        .trim_start_matches("/admin/")
        .trim_end_matches('/');
    let mut parts = rest.split('/');
    let kind = match parts.next()? {
        "keys" => "key",
        "groups" => "group",
        "models" => "model",
        _ => return None,
    };
    let name = parts
        .next()
        .filter(|p| !p.is_empty())
        .and_then(|p| crate::http::decode_path_segment(p).ok());
    Some((kind, name))
}

/// The state of a key (never its secret), group or model, as the audit trail keeps it.
fn state_of(gw: &Gateway, kind: &str, name: &Option<String>) -> Value {
    let Some(name) = name else {
        return Value::Null;
    };
    let config = gw.config();
    match kind {
        "key" => crate::audit::key_in(gw.keys_at(), name),
        "group" => config.group(name).map_or(Value::Null, |g| json!(g)),
        _ => config.model_any(name).map_or(Value::Null, |m| {
            let mut v = m.prices.json(crate::util::unix_now());
            v["name"] = json!(m.name);
            v["disabled"] = json!(m.disabled);
            v
        }),
    }
}

/// What an admin call did (`audit::Action`: the names the CLI writes too).
fn action_of(method: &str, kind: &str, path: &str, before: &Value, after: &Value) -> Action {
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    match (kind, method, last) {
        ("key", "DELETE", _) => Action::KeyDeleted,
        ("group", "DELETE", _) => Action::GroupDeleted,
        (_, "DELETE", _) => Action::ModelDeleted,
        ("key", "POST", "keys") => Action::KeyCreated,
        ("group", "POST", "groups") => Action::GroupCreated,
        ("key", _, "revoke") => Action::KeyRevoked,
        ("key", _, "rotate") => Action::KeyRotated,
        ("key", _, "enable") => Action::KeyEnabled,
        ("key", _, "credit") => Action::KeyCredited,
        ("key", _, "group") => Action::KeyMoved,
        ("key", _, "budget") => Action::KeyBudgetSet,
        ("key", _, "expires") => Action::KeyExpirySet,
        ("key", _, _) => Action::KeyChanged,
        ("group", _, _) => Action::GroupChanged,
        ("model", _, _) if before["disabled"] != after["disabled"] => {
            if after["disabled"] == true {
                Action::ModelDisabled
            } else {
                Action::ModelEnabled
            }
        }
        ("model", _, _) => Action::ModelRepriced,
        _ => Action::ModelChanged,
    }
}

fn route(gw: &Gateway, ex: &Exchange) -> Result<AdminReply, ApiError> {
    let method = ex.request.method.as_str();
    let path = ex.request.path.trim_end_matches('/');
    let parts: Vec<String> = path
        .trim_start_matches("/admin/")
        .split('/')
        .map(crate::http::decode_path_segment)
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let body = || -> Result<Value, ApiError> {
        if ex.request.body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&ex.request.body)
            .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}.")))
    };
    match (method, parts.as_slice()) {
        ("GET", ["overview"]) => usage::overview(gw, ex).map(AdminReply::Json),
        ("GET", ["audit"]) => audit(gw, ex).map(AdminReply::Json),
        ("GET", ["settings"]) => Ok(AdminReply::Json(json!({
            "currency": gw.config().currency,
            "version": env!("CARGO_PKG_VERSION"),
            "ledger": usage::ledger_files(gw),
        }))),
        ("GET", ["usage"]) if ex.request.query_param("format").as_deref() == Some("csv") => usage::csv(gw, ex).map(AdminReply::Csv),
        ("GET", ["usage.csv"]) => usage::csv(gw, ex).map(AdminReply::Csv),
        ("GET", ["usage"]) => usage::records(gw, ex).map(AdminReply::Json),
        ("GET", ["keys"]) => Ok(AdminReply::Json(manage::keys(gw))),
        ("POST", ["keys"]) => manage::create_key(gw, &body()?).map(AdminReply::Json),
        ("POST", ["keys", name, "revoke"]) => manage::revoke_key(gw, name).map(AdminReply::Json),
        ("POST", ["keys", name, "rotate"]) => manage::rotate_key(gw, name).map(AdminReply::Json),
        ("POST", ["keys", name, "enable"]) => manage::enable_key(gw, name).map(AdminReply::Json),
        ("POST", ["keys", name, "budget"]) => manage::set_budget(gw, name, &body()?).map(AdminReply::Json),
        ("POST", ["keys", name, "expires"]) => manage::set_expiry(gw, name, &body()?).map(AdminReply::Json),
        ("POST", ["keys", name, "group"]) => manage::move_key(gw, name, &body()?).map(AdminReply::Json),
        ("DELETE", ["keys", name]) => manage::delete_key(gw, name).map(AdminReply::Json),
        ("POST", ["keys", name, "credit"]) => manage::credit(gw, name, &body()?).map(AdminReply::Json),
        ("GET", ["groups"]) => Ok(AdminReply::Json(manage::groups(gw))),
        ("POST", ["groups"]) => manage::save_group(gw, &body()?, None).map(AdminReply::Json),
        ("DELETE", ["groups", name]) => manage::delete_group(gw, name).map(AdminReply::Json),
        ("PUT" | "POST", ["groups", name]) => manage::save_group(gw, &body()?, Some(name)).map(AdminReply::Json),
        ("GET", ["models"]) => Ok(AdminReply::Json(models::models(gw, ex.request.query_param("probe").is_some()))),
        ("POST" | "PATCH", ["models", name]) => models::change_model(gw, name, &body()?).map(AdminReply::Json),
        _ => Err(ApiError::not_found(format!(
            "Unknown admin endpoint {method} {path}. See docs/ACCESS.md (\"Admin API\") for the list."
        ))),
    }
}

/// `GET /admin/audit?limit=N`: the newest changes first (100 by default, 1,000 at most).
fn audit(gw: &Gateway, ex: &Exchange) -> Result<Value, ApiError> {
    let limit = match ex.request.query_param("limit") {
        None => 100,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| ApiError::invalid_param("limit", "limit: expected 1 to 1000"))?,
    };
    // With a store, every instance's changes; this instance's own file while the store does not answer.
    if let Some(store) = &gw.store {
        if let Ok(lines) = store.audit_newest(limit) {
            let entries: Vec<crate::audit::AuditEntry> = lines
                .iter()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            return Ok(json!({ "data": entries }));
        }
    }
    let entries = crate::audit::newest(&gw.config().data_dir, limit)
        .map_err(|e| ApiError::internal(format!("cannot read the audit log: {e}")))?;
    Ok(json!({ "data": entries }))
}
