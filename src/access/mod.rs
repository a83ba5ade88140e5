//! Who is calling and what they may use: API keys (hashed, from a flat file) and group model allow-lists.

pub mod accounts;
pub mod admin_token;
pub mod guard;
pub mod key_ops;
pub mod keys;

/// Budgets and a key's standing have modules of their own (`crate::budget`, `crate::standing`: the config,
/// the ledger and the store use them too); their old paths here stay for code written against them.
pub use crate::{budget, standing};

use std::sync::Arc;

use crate::config::{glob_match, Config};
use crate::http::Request;
use crate::protocol::{ApiError, Cause, Protocol};

pub use keys::{Identity, KeyCheck, KeyStore};

/// Extracts the presented key from `x-api-key` or `Authorization: Bearer`, and checks it.
pub fn authenticate(
    req: &Request,
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
        KeyCheck::Unknown => Err(ApiError::unauthorized(format!(
            "Invalid API key. Check that it is complete (keys start with `{}` and are {} characters long) and \
             that the client's base URL points at this gateway.",
            keys::KEY_PREFIX,
            keys::KEY_PREFIX.len() + 40
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
