//! The operator console: the admin JSON API (`/admin/...`, for the console and for scripts) and the web UI
//! at `/console` (static files embedded in the binary; they hold no data). Every admin call needs the admin
//! token (`Authorization: Bearer <token>`, compared in constant time); with no token configured the API
//! refuses every call.

mod assets;
pub mod guard;
mod manage;
mod usage;

use serde_json::{json, Value};

use crate::access::{constant_time_eq, token_digest};
use crate::http::Exchange;
use crate::protocol::{ApiError, ErrorKind};
use crate::server::gateway::Gateway;
use crate::server::respond;
use crate::server::trace::Trace;

pub use assets::serve as serve_ui;

/// Checks the admin token (also for `/metrics` with `metrics_auth`).
pub fn authorize(gw: &Gateway, ex: &Exchange) -> Result<(), ApiError> {
    let Some(expected) = &gw.admin_token else {
        return Err(ApiError::new(
            403,
            ErrorKind::Permission,
            format!(
                "The admin API is disabled: no admin token is configured. Set the environment variable {} to a \
                 secret and restart tollgate.",
                gw.config().admin_token_env
            ),
        )
        .with_code("admin_disabled"));
    };
    let presented = ex
        .request
        .header("authorization")
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .unwrap_or("");
    let addr = ex.peer.ip();
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
        .with_code("admin_auth_throttled")
        .with_retry_after(secs));
    }
    if presented.is_empty() || !constant_time_eq(&token_digest(presented), expected) {
        gw.admin_guard.failed(addr, now);
        return Err(ApiError::unauthorized(
            "Missing or wrong admin token (send `Authorization: Bearer <admin token>`).",
        )
        .with_code("invalid_admin_token"));
    }
    gw.admin_guard.succeeded(addr);
    Ok(())
}

/// Handles `/admin/...`.
pub fn handle(gw: &Gateway, ex: &mut Exchange, trace: &Trace) {
    let result = authorize(gw, ex).and_then(|()| route(gw, ex));
    match result {
        Ok(Answer::Json(v)) => respond::json(
            ex.response(),
            trace,
            200,
            v.to_string().as_bytes(),
            &[("cache-control", "no-store")],
        ),
        Ok(Answer::Csv(body)) => {
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
pub enum Answer {
    Json(Value),
    Csv(String),
}

fn route(gw: &Gateway, ex: &Exchange) -> Result<Answer, ApiError> {
    let method = ex.request.method.as_str();
    let path = ex.request.path.trim_end_matches('/');
    let parts: Vec<String> = path
        .trim_start_matches("/admin/")
        .split('/')
        .map(crate::http::decode_path_segment)
        .collect::<Result<_, _>>()
        .map_err(ApiError::invalid)?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let body = || -> Result<Value, ApiError> {
        if ex.request.body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&ex.request.body)
            .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}.")))
    };
    match (method, parts.as_slice()) {
        ("GET", ["overview"]) => usage::overview(gw).map(Answer::Json),
        ("GET", ["usage"]) if ex.request.query_param("format").as_deref() == Some("csv") => usage::csv(gw, ex).map(Answer::Csv),
        ("GET", ["usage.csv"]) => usage::csv(gw, ex).map(Answer::Csv),
        ("GET", ["usage"]) => usage::records(gw, ex).map(Answer::Json),
        ("GET", ["keys"]) => Ok(Answer::Json(manage::keys(gw))),
        ("POST", ["keys"]) => manage::create_key(gw, &body()?).map(Answer::Json),
        ("POST", ["keys", name, "revoke"]) => manage::revoke_key(gw, name).map(Answer::Json),
        ("POST", ["keys", name, "rotate"]) => manage::rotate_key(gw, name).map(Answer::Json),
        ("POST", ["keys", name, "enable"]) => manage::enable_key(gw, name).map(Answer::Json),
        ("DELETE", ["keys", name]) => manage::delete_key(gw, name).map(Answer::Json),
        ("POST", ["keys", name, "credit"]) => manage::credit(gw, name, &body()?).map(Answer::Json),
        ("GET", ["groups"]) => Ok(Answer::Json(manage::groups(gw))),
        ("POST", ["groups"]) => manage::save_group(gw, &body()?, None).map(Answer::Json),
        ("DELETE", ["groups", name]) => manage::delete_group(gw, name).map(Answer::Json),
        ("PUT" | "POST", ["groups", name]) => manage::save_group(gw, &body()?, Some(name)).map(Answer::Json),
        ("GET", ["models"]) => Ok(Answer::Json(manage::models(gw, ex.request.query_param("probe").is_some()))),
        ("POST" | "PATCH", ["models", name]) => manage::change_model(gw, name, &body()?).map(Answer::Json),
        _ => Err(ApiError::not_found(format!(
            "Unknown admin endpoint {method} {path}. See the README's admin API section for the list."
        ))),
    }
}
