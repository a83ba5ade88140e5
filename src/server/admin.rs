//! The admin JSON API (`/admin/...`), for the console and for scripts. Every call needs the admin token
//! (`Authorization: Bearer <token>`, compared in constant time); with no token configured the API refuses
//! every call.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::respond::{self, Trace};
use super::Gateway;
use crate::http::Exchange;
use crate::ledger::{Filter, StatusFilter};
use crate::protocol::{ApiError, ErrorKind};

/// The stored form of the admin token.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equality that takes the same time wherever the inputs differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn authorize(gw: &Gateway, ex: &Exchange) -> Result<(), ApiError> {
    let Some(expected) = &gw.admin_token else {
        return Err(ApiError::new(
            403,
            ErrorKind::Permission,
            format!(
                "The admin API is disabled: no admin token is configured. Set the environment variable {} to a \
                 secret and restart tollgate.",
                gw.config.admin_token_env
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
    if presented.is_empty() || !constant_time_eq(&token_digest(presented), expected) {
        return Err(ApiError::unauthorized(
            "Missing or wrong admin token (send `Authorization: Bearer <admin token>`).",
        ));
    }
    Ok(())
}

/// Handles `/admin/...`.
pub fn handle(gw: &Gateway, ex: &mut Exchange, trace: &Trace) {
    let result = authorize(gw, ex).and_then(|()| {
        match (ex.request.method.as_str(), ex.request.path.as_str()) {
            ("GET", "/admin/usage") => usage(gw, ex),
            ("GET", "/admin/keys") => Ok(keys(gw)),
            _ => Err(ApiError::not_found(format!(
                "Unknown admin endpoint {} {}. Admin endpoints: GET /admin/usage, GET /admin/keys.",
                ex.request.method, ex.request.path
            ))),
        }
    });
    match result {
        Ok(v) => respond::json(
            ex.response(),
            trace,
            200,
            v.to_string().as_bytes(),
            &[("cache-control", "no-store")],
        ),
        Err(e) => respond::error(ex.response(), trace, &e),
    }
}

/// A time bound from a query parameter: RFC 3339, or Unix seconds.
fn time_param(ex: &Exchange, name: &str) -> Result<Option<String>, ApiError> {
    let Some(v) = ex.request.query_param(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if let Ok(secs) = v.parse::<u64>() {
        return Ok(Some(crate::util::rfc3339(secs)));
    }
    match crate::util::parse_rfc3339(&v) {
        Some(secs) => Ok(Some(crate::util::rfc3339_millis(
            secs * 1000 + millis_of(&v),
        ))),
        None => Err(ApiError::invalid_param(
            name,
            format!("`{name}` must be RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds"),
        )),
    }
}

fn millis_of(ts: &str) -> u64 {
    ts.get(19..)
        .and_then(|rest| rest.strip_prefix('.'))
        .map(|f| {
            f.chars()
                .take_while(char::is_ascii_digit)
                .chain("000".chars())
                .take(3)
                .collect::<String>()
        })
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

fn usage(gw: &Gateway, ex: &Exchange) -> Result<Value, ApiError> {
    let q = |n: &str| ex.request.query_param(n).filter(|v| !v.is_empty());
    let status = match q("status") {
        None => None,
        Some(s) => Some(StatusFilter::parse(&s).ok_or_else(|| {
            ApiError::invalid_param(
                "status",
                "`status` must be a code (200), a class (4xx), client_closed or error",
            )
        })?),
    };
    let number = |n: &str, default: usize| -> Result<usize, ApiError> {
        match q(n) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| ApiError::invalid_param(n, format!("`{n}` must be a number"))),
        }
    };
    let filter = Filter {
        key: q("key"),
        model: q("model"),
        status,
        client_request_id: q("client_request_id"),
        request_id: q("request_id"),
        since: time_param(ex, "since")?,
        until: time_param(ex, "until")?,
        offset: number("offset", 0)?,
        limit: number("limit", 100)?.clamp(1, 10_000),
    };
    let records = gw
        .ledger
        .query(&filter)
        .map_err(|e| ApiError::internal(format!("cannot read the usage ledger: {e}")))?;
    Ok(json!({"data": records}))
}

fn keys(gw: &Gateway) -> Value {
    let data: Vec<Value> = gw
        .keys
        .records()
        .iter()
        .map(|k| {
            let spent = gw.accounts.spent(&k.name);
            json!({
                "name": k.name,
                "group": k.group,
                "credit": k.credit,
                "spent": spent,
                "balance": k.credit.map(|c| c - spent),
                "disabled": k.disabled,
                "created": k.created,
            })
        })
        .collect();
    json!({"data": data})
}
