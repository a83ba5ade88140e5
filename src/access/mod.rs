//! Who is calling and what they may use: API keys (hashed, from a flat file) and group model allow-lists.

pub mod accounts;
pub(crate) mod admin_token;
pub(crate) mod guard;
pub mod key_ops;
pub mod keys;

use std::sync::Arc;

use crate::config::names::glob_match;
use crate::config::Config;
use crate::http::HttpRequest;
use crate::protocol::{ApiError, Cause, Protocol};

pub use keys::{Identity, KeyCheck, KeyStore};

/// Extracts the presented key from `x-api-key` or `Authorization: Bearer`, and checks it.
pub fn authenticate(
    req: &HttpRequest,
    protocol: Protocol,
    keys: &KeyStore,
) -> Result<Arc<Identity>, ApiError> {
    let presented = protocol.presented_key(req)?;
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
            .with_cause(Cause::KeyExpired)),
            _ => Ok(id),
        },
        KeyCheck::Revoked(_) => Err(ApiError::unauthorized(
            "This API key has been revoked. Ask the operator for a new key.",
        )),
        KeyCheck::Unknown => Err(ApiError::unauthorized(unknown_key(presented))),
    }
}

/// What is true of a key this gateway does not know, by its shape: one of the right shape is simply not
/// one of this gateway's (keys belong to the data directory, or the shared store, they were made in); one
/// of another shape is incomplete, or not a tollgate key at all (another provider's, the admin token).
fn unknown_key(presented: &str) -> String {
    let len = keys::KEY_PREFIX.len() + keys::KEY_RANDOM_LEN;
    let shaped = presented.len() == len
        && presented.starts_with(keys::KEY_PREFIX)
        && presented[keys::KEY_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric());
    if shaped {
        return "This is not a key of this gateway. Keys are made by its operator (`tollgate keys add`, or the \
                console) and work only on the gateway whose data directory (or shared store) made them: this one may \
                be from another gateway, or deleted. Check that the client's base URL points at this gateway, or \
                ask its operator for a key."
            .to_string();
    }
    let other = if presented.starts_with(admin_token::PREFIX) {
        Some("This is the admin token (for the console and /admin/), not an API key.")
    } else if presented.starts_with("sk-ant-") {
        Some("This looks like an Anthropic API key: give the client a key of this gateway instead.")
    } else if presented.starts_with("sk-") {
        Some("This looks like an OpenAI API key: give the client a key of this gateway instead.")
    } else if presented.starts_with("AIza") {
        Some("This looks like a Google API key: give the client a key of this gateway instead.")
    } else {
        None
    };
    format!(
        "Invalid API key. {}Keys of this gateway start with `{}` and are {len} characters long; check that it is \
         complete and that the client's base URL points at this gateway.",
        other.map(|o| format!("{o} ")).unwrap_or_default(),
        keys::KEY_PREFIX,
    )
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
    .with_cause(Cause::ModelNotAllowed)
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

    /// Issue 40: a complete key this gateway does not know is not blamed on its length; other shapes keep
    /// the hint, and say whose they look like.
    #[test]
    fn an_unknown_key_is_told_what_is_true_of_it() {
        let complete = keys::generate_key();
        let said = unknown_key(&complete);
        assert!(
            said.contains("not a key of this gateway") && !said.contains("characters long"),
            "{said}"
        );
        let said = unknown_key(&complete[..20]);
        assert!(said.contains("43 characters long"), "{said}");
        assert!(unknown_key("sk-proj-abc").contains("OpenAI API key"));
        assert!(unknown_key("sk-ant-api03-abc").contains("Anthropic API key"));
        assert!(unknown_key("AIzaSyAbc").contains("Google API key"));
        assert!(unknown_key("tgadm_abc").contains("admin token"));
    }
}
