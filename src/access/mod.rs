//! Who is calling and what they may use: API keys (hashed, from a flat file) and group model allow-lists.

pub mod accounts;
pub mod budget;
pub mod key_ops;
pub mod keys;
pub mod standing;

use std::sync::Arc;

use crate::config::{glob_match, Config};
use crate::http::Request;
use crate::protocol::{ApiError, Protocol};

pub use keys::{Identity, KeyCheck, KeyStore};

/// Extracts the presented key from `x-api-key` or `Authorization: Bearer`, and checks it.
pub fn authenticate(
    req: &Request,
    protocol: Protocol,
    keys: &KeyStore,
) -> Result<Arc<Identity>, ApiError> {
    let presented = presented_key(req, protocol)?;
    if presented.chars().any(char::is_whitespace) {
        return Err(ApiError::unauthorized(
            "The API key contains whitespace. Send the key exactly as issued, with no spaces or line breaks.",
        ));
    }
    match keys.check(presented) {
        KeyCheck::Valid(id) => match id.expires {
            Some(at) if crate::util::unix_now() >= at => Err(ApiError::unauthorized(format!(
                "This API key expired at {}. Ask the operator to extend it or for a new key.",
                crate::util::rfc3339(at)
            ))
            .with_code("key_expired")),
            _ => Ok(id),
        },
        KeyCheck::Revoked(_) => Err(ApiError::unauthorized(
            "This API key has been revoked. Ask the operator for a new key.",
        )),
        KeyCheck::Unknown => Err(ApiError::unauthorized(format!(
            "Invalid API key. Check that it is complete (keys start with `{}` and are {} characters long) and \
             that the client's base URL points at this gateway.",
            keys::KEY_PREFIX,
            keys::KEY_PREFIX.len() + 40
        ))),
    }
}

fn presented_key(req: &Request, protocol: Protocol) -> Result<&str, ApiError> {
    let how = match protocol {
        Protocol::Messages => "`x-api-key: <key>` or `Authorization: Bearer <key>`",
        _ => "`Authorization: Bearer <key>`",
    };
    // Every credential the request carries; two different ones are refused rather than one billed.
    let mut keys: Vec<(&'static str, &str)> = Vec::new();
    for k in req.header_all("x-api-key").filter(|k| !k.is_empty()) {
        keys.push(("`x-api-key`", k));
    }
    let mut bad_auth: Option<ApiError> = None;
    for auth in req.header_all("authorization") {
        let mut split = auth.splitn(2, ' ');
        let scheme = split.next().unwrap_or("");
        match split.next() {
            Some(key) if scheme.eq_ignore_ascii_case("bearer") => {
                let key = key.trim_start();
                if key.is_empty() {
                    bad_auth.get_or_insert_with(|| {
                        ApiError::unauthorized(format!("Empty API key. Send it as {how}."))
                    });
                } else {
                    keys.push(("`Authorization`", key));
                }
            }
            _ => {
                bad_auth.get_or_insert_with(|| {
                    ApiError::unauthorized(format!(
                        "The Authorization header must be `Bearer <key>` (the word Bearer, a space, then the key). \
                         Send it as {how}."
                    ))
                });
            }
        }
    }
    let first = keys.first().copied();
    if let Some(((first_in, _), (other_in, _))) =
        first.and_then(|f| keys.iter().find(|(_, k)| *k != f.1).map(|o| (f, *o)))
    {
        return Err(ApiError::invalid(format!(
            "The request carries two different API keys (in {first_in} and {other_in}). Send exactly one key, \
             as {how}."
        ))
        .with_code("conflicting_credentials"));
    }
    match (first, bad_auth) {
        (Some((_, key)), _) => Ok(key),
        (None, Some(e)) => Err(e),
        (None, None) => Err(ApiError::unauthorized(format!(
            "Missing API key. Send it as {how}."
        ))),
    }
}

/// Whether a group may use the model entry `model` when asked for it as `requested`. The group's globs are
/// matched against one concrete name: the entry's own name for an entry with a plain name (whatever alias
/// was asked for: an alias is resolved to its entry and never counts on its own, so aliases never widen
/// access), and the name asked for for a pattern entry (which has no aliases). Never against a pattern's
/// text: a name holding `*` or `?` matches no glob (`glob_match`), so `o?` is not stretched over `o*`.
pub fn group_allows(config: &Config, group: &str, model: &str, requested: &str) -> bool {
    let name = if crate::config::names::is_pattern(model) {
        requested
    } else {
        model
    };
    config
        .group(group)
        .is_some_and(|g| g.models.iter().any(|p| glob_match(p, name)))
}

/// 403 for a model outside the caller's group (naming only the model and the group).
pub fn forbidden_model(model: &str, group: &str) -> ApiError {
    ApiError::forbidden(format!(
        "Your key's group `{group}` is not allowed to use the model `{model}`. Ask the operator for access, or \
         pick a model from GET /v1/models."
    ))
    .with_param("model")
    .with_code("model_not_allowed")
}

/// The stored form of the admin token.
pub fn token_digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Equality that takes the same time wherever the inputs differ.
pub fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            query: String::new(),
            version: 1,
            headers: headers
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            body: Vec::new(),
            keep_alive: true,
        }
    }

    #[test]
    fn key_extraction_rules() {
        assert_eq!(
            presented_key(&req(&[("authorization", "Bearer abc")]), Protocol::Chat).unwrap(),
            "abc"
        );
        assert_eq!(
            presented_key(&req(&[("authorization", "bearer abc")]), Protocol::Chat).unwrap(),
            "abc"
        );
        assert_eq!(
            presented_key(&req(&[("x-api-key", "abc")]), Protocol::Messages).unwrap(),
            "abc"
        );
        assert_eq!(
            presented_key(&req(&[("authorization", "abc")]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            presented_key(&req(&[]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            presented_key(&req(&[("authorization", "Bearer ")]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            presented_key(&req(&[("authorization", "Basic abc")]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
    }

    #[test]
    fn two_different_keys_are_refused() {
        let e = presented_key(
            &req(&[("authorization", "Bearer abc"), ("x-api-key", "xyz")]),
            Protocol::Messages,
        )
        .unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.message().contains("two different API keys"));
        assert!(!e.message().contains("abc") && !e.message().contains("xyz"));
        let e = presented_key(
            &req(&[
                ("authorization", "Bearer abc"),
                ("authorization", "Bearer xyz"),
            ]),
            Protocol::Chat,
        )
        .unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(
            presented_key(
                &req(&[("authorization", "Bearer abc"), ("x-api-key", "abc")]),
                Protocol::Messages
            )
            .unwrap(),
            "abc",
            "the same key twice is one credential"
        );
    }
}
