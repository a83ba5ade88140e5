//! Where the admin token comes from, and the one kept in the data directory.
//!
//! - The config names `admin_token_env`: the token is that variable's value, as it was at the start (unset or
//!   empty: the admin API stays closed).
//! - It names none and `TOLLGATE_ADMIN_TOKEN` is set: that value, as before.
//! - It names none and `TOLLGATE_ADMIN_TOKEN` is unset: the token kept in the data directory's
//!   `admin-token` (its SHA-256 only, never the token), made on the first start and printed once with the
//!   console's address, so the console works on the first run without a restart; `tollgate admin-token
//!   rotate` replaces it, and a running server takes the new one at its next admin request.
//!
//! A token made here is `tgadm_` and 40 letters and digits: never taken for an API key (`tg_…`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::config::Config;

/// The file in the data directory that holds the admin token's SHA-256 (hex, one line).
pub(crate) const FILE: &str = "admin-token";

/// What an admin token made here starts with.
pub(crate) const PREFIX: &str = "tgadm_";

/// Where a config's admin token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenSource {
    /// The value of this environment variable (read with the config).
    Env(String),
    /// The token kept in the data directory (this file).
    File(PathBuf),
    /// The config names this variable and it is unset: the admin API is closed.
    Closed(String),
}

/// Where `config`'s admin token comes from.
pub(crate) fn source(config: &Config) -> TokenSource {
    if config.admin_token().is_some() {
        return TokenSource::Env(config.admin_token_env.clone());
    }
    if config.admin_token_env_named {
        return TokenSource::Closed(config.admin_token_env.clone());
    }
    TokenSource::File(config.data_dir.join(FILE))
}

/// A new token, with its SHA-256 written (privately, atomically) to `path`, replacing any before it.
pub(crate) fn make(path: &Path) -> std::io::Result<String> {
    let token = format!("{PREFIX}{}", crate::util::random_base62(40));
    let line = format!("{}\n", hex(&super::token_digest(&token)));
    crate::util::write_atomic(path, line.as_bytes())?;
    Ok(token)
}

/// The digest kept at `path` (None: no file yet).
pub(crate) fn read(path: &Path) -> std::io::Result<Option<[u8; 32]>> {
    let text = match crate::util::read_owned_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse_hex(text.trim()).map(Some).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} does not hold an admin token's SHA-256 (64 hex digits); `tollgate admin-token rotate` makes a \
                 new token",
                path.display()
            ),
        )
    })
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The admin token a running server checks: fixed from the environment, or read from the data directory's
/// file again whenever the file changed (so a rotation takes effect without a restart).
#[derive(Debug)]
pub(crate) struct AdminToken {
    fixed: Option<[u8; 32]>,
    file: Option<PathBuf>,
    /// The file's modification time and digest when last read.
    seen: Mutex<Option<(SystemTime, Option<[u8; 32]>)>>,
}

impl AdminToken {
    pub(crate) fn for_config(config: &Config) -> AdminToken {
        let (fixed, file) = match source(config) {
            TokenSource::Env(_) => (config.admin_token().map(|t| super::token_digest(&t)), None),
            TokenSource::File(path) => (None, Some(path)),
            TokenSource::Closed(_) => (None, None),
        };
        AdminToken {
            fixed,
            file,
            seen: Mutex::new(None),
        }
    }

    /// The digest to compare with (None: the admin API is closed).
    pub(crate) fn digest(&self) -> Option<[u8; 32]> {
        if self.fixed.is_some() {
            return self.fixed;
        }
        let path = self.file.as_ref()?;
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
        let mut seen = crate::util::lock(&self.seen);
        if let Some((at, digest)) = *seen {
            if at == modified {
                return digest;
            }
        }
        let digest = match read(path) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("admin token: {e}");
                None
            }
        };
        *seen = Some((modified, digest));
        digest
    }

    /// Whether the admin API can open at all (a token from the environment, or a data directory's file).
    pub(crate) fn configured(&self) -> bool {
        self.fixed.is_some() || self.file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_token_is_kept_as_its_digest_only() {
        let dir =
            std::env::temp_dir().join(format!("tollgate-admin-{}", crate::util::random_base62(8)));
        crate::util::create_private_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        assert_eq!(read(&path).unwrap(), None);
        let token = make(&path).unwrap();
        assert!(
            token.starts_with(PREFIX) && !token.starts_with("tg_"),
            "{token}"
        );
        assert_eq!(token.len(), PREFIX.len() + 40);
        let kept = std::fs::read_to_string(&path).unwrap();
        assert!(!kept.contains(&token));
        assert_eq!(
            read(&path).unwrap(),
            Some(super::super::token_digest(&token))
        );
        let again = make(&path).unwrap();
        assert_ne!(again, token);
        assert_eq!(
            read(&path).unwrap(),
            Some(super::super::token_digest(&again))
        );
        std::fs::write(&path, "nonsense\n").unwrap();
        assert!(read(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
