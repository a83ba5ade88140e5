//! The audit trail: every change an operator makes (keys created, revoked, enabled, deleted, rotated,
//! credited; groups created, changed, deleted; models repriced, disabled, enabled), from the console, the
//! admin API or the CLI, appended to `data_dir/audit.jsonl` with who made it, what it was before and after,
//! when, and the request id. It never holds a key or a key's hash. The file is opened before the change is
//! made ([`Trail`]): a change that could not be recorded is refused, not made unrecorded.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::util::{rfc3339_millis, unix_millis};

/// The audit log's file name in `data_dir`.
pub const AUDIT_FILE: &str = "audit.jsonl";

/// Who made a change.
pub const ACTOR_ADMIN: &str = "admin token";
pub const ACTOR_CLI: &str = "cli";

/// One change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub ts: String,
    pub actor: String,
    /// `key.created`, `key.revoked`, `group.changed`, `model.repriced`, ...
    pub action: String,
    /// What was changed: `key app`, `group default`, `model gpt`.
    pub target: String,
    pub before: Value,
    pub after: Value,
    pub request_id: Option<String>,
}

impl Entry {
    pub fn new(actor: &str, action: &str, target: String, before: Value, after: Value) -> Entry {
        Entry {
            ts: rfc3339_millis(unix_millis()),
            actor: actor.to_string(),
            action: action.to_string(),
            target,
            before,
            after,
            request_id: None,
        }
    }
}

/// The audit file, opened before a change is made: a change whose entry cannot be written (the file is a
/// symbolic link, another user's, not writable) is refused instead of made unrecorded. Opened only as a
/// regular file this user owns, never through a link (`util::open_owned`, checked on the descriptor).
pub struct Trail {
    file: std::fs::File,
    path: PathBuf,
}

impl Trail {
    /// Opens (creating when missing, mode 0600) the audit file in `data_dir`.
    pub fn open(data_dir: &Path) -> io::Result<Trail> {
        let path = data_dir.join(AUDIT_FILE);
        let opened = crate::util::create_private_dir_all(data_dir).and_then(|()| {
            crate::util::open_owned(&path, std::fs::OpenOptions::new().create(true).append(true))
        });
        match opened {
            Ok(file) => Ok(Trail { file, path }),
            // The refusals of `open_owned` name the file already.
            Err(e) if e.to_string().contains(&*path.to_string_lossy()) => Err(e),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("cannot open the audit file {}: {e}", path.display()),
            )),
        }
    }

    /// Appends an entry (one line, synced). A failure now, with the change made, is logged at ERROR with
    /// the whole entry (it holds no secret) on the log's must-write path, so the entry is not lost.
    pub fn write(mut self, entry: &Entry) {
        let written = serde_json::to_vec(entry)
            .map_err(io::Error::other)
            .and_then(|mut line| {
                line.push(b'\n');
                // One write of the whole line: appends of lines under the pipe buffer size never interleave.
                self.file.write_all(&line)?;
                self.file.sync_data()
            });
        if let Err(e) = written {
            log::error!(
                target: crate::logging::MUST_WRITE_TARGET,
                "could not write the audit entry {} to {}: {e}",
                serde_json::to_string(entry).unwrap_or_default(),
                self.path.display()
            );
        }
    }
}

/// The newest `limit` entries, newest first (unreadable lines skipped).
pub fn newest(data_dir: &Path, limit: usize) -> io::Result<Vec<Entry>> {
    let f = match crate::util::open_owned(
        &data_dir.join(AUDIT_FILE),
        std::fs::OpenOptions::new().read(true),
    ) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut all: Vec<Entry> = io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect();
    all.reverse();
    all.truncate(limit);
    Ok(all)
}

/// What the audit trail keeps of a key: never its secret or hash.
pub fn key_state(r: &crate::access::keys::KeyRecord) -> Value {
    serde_json::json!({"name": r.name, "group": r.group, "credit": r.credit, "disabled": r.disabled,
                       "deleted": r.deleted, "budget": r.budget, "expires": r.expires})
}

/// A key's state where the keys live (null when there is none).
pub fn key_in(at: crate::access::key_ops::KeysAt, name: &str) -> Value {
    crate::access::key_ops::read_all(at)
        .ok()
        .and_then(|rs| rs.into_iter().find(|r| r.name == name))
        .map_or(Value::Null, |r| key_state(&r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_newest_first() {
        let dir = std::env::temp_dir().join(format!("tollgate-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..3 {
            let e = Entry::new(
                ACTOR_CLI,
                "key.created",
                format!("key k{i}"),
                Value::Null,
                serde_json::json!({"name": format!("k{i}")}),
            );
            Trail::open(&dir).unwrap().write(&e);
        }
        let got = newest(&dir, 2).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].target, "key k2");
        assert_eq!(got[1].target, "key k1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
