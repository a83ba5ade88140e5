//! The audit trail: every change an operator makes (keys created, revoked, enabled, deleted, rotated,
//! credited; groups created, changed, deleted; models repriced, disabled, enabled), from the console, the
//! admin API or the CLI, appended to `data_dir/audit.jsonl` with who made it, what it was before and after,
//! when, and the request id. It never holds a key or a key's hash.

use std::io::{self, BufRead, Write};
use std::path::Path;

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

/// Appends an entry (one line, synced). A failure is logged with the entry (which holds no secret): the
/// change itself has already been made.
pub fn append(data_dir: &Path, entry: &Entry) {
    if let Err(e) = try_append(data_dir, entry) {
        log::error!(
            "could not write the audit entry {} to {}: {e}",
            serde_json::to_string(entry).unwrap_or_default(),
            data_dir.join(AUDIT_FILE).display()
        );
    }
}

fn try_append(data_dir: &Path, entry: &Entry) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut line = serde_json::to_vec(entry).map_err(io::Error::other)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(data_dir.join(AUDIT_FILE))?;
    // One write of the whole line: appends of lines under the pipe buffer size never interleave.
    f.write_all(&line)?;
    f.sync_data()
}

/// The newest `limit` entries, newest first (unreadable lines skipped).
pub fn newest(data_dir: &Path, limit: usize) -> io::Result<Vec<Entry>> {
    let f = match std::fs::File::open(data_dir.join(AUDIT_FILE)) {
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
                       "deleted": r.deleted})
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
            append(&dir, &e);
        }
        let got = newest(&dir, 2).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].target, "key k2");
        assert_eq!(got[1].target, "key k1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
