//! Keys in headers: a key sent as a bearer token, and the key a client presents read (from its protocol's key
//! header, `x-api-key` or Gemini's `x-goog-api-key`, a query parameter where the protocol takes one, or
//! `Authorization: Bearer`; each codec's `presented_key` says how its clients are told to send it). Checking
//! the key is `access`'s.

use std::borrow::Cow;

use super::{ApiError, Cause};
use crate::http::HttpRequest;

/// A key sent as a bearer token (`Authorization: Bearer <key>`).
pub(crate) fn bearer(key: &str) -> (&'static str, Cow<'_, str>) {
    ("authorization", Cow::Owned(format!("Bearer {key}")))
}

/// Extracts the presented key from the `header`, the `query` parameter (as sent: a key has nothing to
/// escape), or `Authorization: Bearer`; `how` is how the protocol's clients send it (for the error texts).
pub(crate) fn presented_key_in<'r>(
    req: &'r HttpRequest,
    header: &'static str,
    query: Option<&'static str>,
    how: &str,
) -> Result<&'r str, ApiError> {
    // Every credential the request carries; two different ones are refused rather than one billed.
    let mut keys = Presented::default();
    for k in req.header_all(header).filter(|k| !k.is_empty()) {
        keys.push((header, k));
    }
    if let Some(name) = query {
        let values = req.query.split('&').filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name && !v.is_empty()).then_some(v)
        });
        for v in values {
            keys.push((name, v));
        }
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
                    keys.push(("Authorization", key));
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
    let first = keys.first;
    if let Some(((first_in, _), (other_in, _))) = first.zip(keys.other) {
        return Err(ApiError::invalid(format!(
            "The request carries two different API keys (in `{first_in}` and `{other_in}`). Send exactly one \
             key, as {how}."
        ))
        .with_cause(Cause::ConflictingCredentials));
    }
    match (first, bad_auth) {
        (Some((_, key)), _) => Ok(key),
        (None, Some(e)) => Err(e),
        (None, None) => Err(ApiError::unauthorized(format!(
            "Missing API key. Send it as {how}."
        ))),
    }
}

/// The credentials a request carries, as far as they matter: the first one, and the first one that differs
/// from it (with where each was found).
#[derive(Default)]
struct Presented<'r> {
    first: Option<(&'static str, &'r str)>,
    other: Option<(&'static str, &'r str)>,
}

impl<'r> Presented<'r> {
    fn push(&mut self, key: (&'static str, &'r str)) {
        match self.first {
            None => self.first = Some(key),
            Some((_, first)) if self.other.is_none() && key.1 != first => self.other = Some(key),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;

    fn presented_key_of(req: &HttpRequest, p: Protocol) -> Result<&str, ApiError> {
        p.presented_key(req)
    }

    fn req(headers: &[(&str, &str)]) -> HttpRequest {
        HttpRequest {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            query: String::new(),
            version: 1,
            headers: headers
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            body: Default::default(),
            keep_alive: true,
        }
    }

    #[test]
    fn key_extraction_rules() {
        assert_eq!(
            presented_key_of(&req(&[("authorization", "Bearer abc")]), Protocol::Chat).unwrap(),
            "abc"
        );
        assert_eq!(
            presented_key_of(&req(&[("authorization", "bearer abc")]), Protocol::Chat).unwrap(),
            "abc"
        );
        assert_eq!(
            presented_key_of(&req(&[("x-api-key", "abc")]), Protocol::Messages).unwrap(),
            "abc"
        );
        assert_eq!(
            presented_key_of(&req(&[("authorization", "abc")]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            presented_key_of(&req(&[]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            presented_key_of(&req(&[("authorization", "Bearer ")]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            presented_key_of(&req(&[("authorization", "Basic abc")]), Protocol::Chat)
                .unwrap_err()
                .status(),
            401
        );
    }

    #[test]
    fn two_different_keys_are_refused() {
        let e = presented_key_of(
            &req(&[("authorization", "Bearer abc"), ("x-api-key", "xyz")]),
            Protocol::Messages,
        )
        .unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.message().contains("two different API keys"));
        assert!(!e.message().contains("abc") && !e.message().contains("xyz"));
        let e = presented_key_of(
            &req(&[
                ("authorization", "Bearer abc"),
                ("authorization", "Bearer xyz"),
            ]),
            Protocol::Chat,
        )
        .unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(
            presented_key_of(
                &req(&[("authorization", "Bearer abc"), ("x-api-key", "abc")]),
                Protocol::Messages
            )
            .unwrap(),
            "abc",
            "the same key twice is one credential"
        );
    }
}
