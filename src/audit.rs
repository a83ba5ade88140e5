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
pub(crate) const AUDIT_FILE: &str = "audit.jsonl";

/// Who made a change.
pub(crate) const ACTOR_ADMIN: &str = "admin token";
pub(crate) const ACTOR_CLI: &str = "cli";

/// What a change did: the one set of action names the console, the admin API and the CLI write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    KeyCreated,
    KeyRevoked,
    KeyEnabled,
    KeyDeleted,
    KeyRotated,
    KeyCredited,
    KeyMoved,
    KeyBudgetSet,
    KeyExpirySet,
    /// An admin call on a key that none of the above names.
    KeyChanged,
    GroupCreated,
    GroupChanged,
    GroupDeleted,
    ModelRepriced,
    ModelDisabled,
    ModelEnabled,
    ModelDeleted,
    /// An admin call on a model that none of the above names.
    ModelChanged,
}

impl Action {
    #[cfg(test)]
    pub(crate) const ALL: [Action; 18] = [
        Action::KeyCreated,
        Action::KeyRevoked,
        Action::KeyEnabled,
        Action::KeyDeleted,
        Action::KeyRotated,
        Action::KeyCredited,
        Action::KeyMoved,
        Action::KeyBudgetSet,
        Action::KeyExpirySet,
        Action::KeyChanged,
        Action::GroupCreated,
        Action::GroupChanged,
        Action::GroupDeleted,
        Action::ModelRepriced,
        Action::ModelDisabled,
        Action::ModelEnabled,
        Action::ModelDeleted,
        Action::ModelChanged,
    ];

    /// The name written in `audit.jsonl`: `key.created`, `group.changed`, `model.repriced`, ...
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::KeyCreated => "key.created",
            Action::KeyRevoked => "key.revoked",
            Action::KeyEnabled => "key.enabled",
            Action::KeyDeleted => "key.deleted",
            Action::KeyRotated => "key.rotated",
            Action::KeyCredited => "key.credited",
            Action::KeyMoved => "key.moved",
            Action::KeyBudgetSet => "key.budget_set",
            Action::KeyExpirySet => "key.expiry_set",
            Action::KeyChanged => "key.changed",
            Action::GroupCreated => "group.created",
            Action::GroupChanged => "group.changed",
            Action::GroupDeleted => "group.deleted",
            Action::ModelRepriced => "model.repriced",
            Action::ModelDisabled => "model.disabled",
            Action::ModelEnabled => "model.enabled",
            Action::ModelDeleted => "model.deleted",
            Action::ModelChanged => "model.changed",
        }
    }

    /// The action an entry names; None for a name this version does not know. Every name ever written
    /// reads back: the CLI and the console have always written these.
    #[cfg(test)]
    pub(crate) fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The action of a key change.
    pub(crate) fn of_key(change: &crate::access::key_ops::KeyChange) -> Action {
        use crate::access::key_ops::KeyChange;
        match change {
            KeyChange::Add { .. } => Action::KeyCreated,
            KeyChange::Revoke => Action::KeyRevoked,
            KeyChange::Enable => Action::KeyEnabled,
            KeyChange::Delete => Action::KeyDeleted,
            KeyChange::Rotate => Action::KeyRotated,
            KeyChange::Credit(_) => Action::KeyCredited,
            KeyChange::Budget(_) => Action::KeyBudgetSet,
            KeyChange::Expiry(_) => Action::KeyExpirySet,
            KeyChange::Move(_) => Action::KeyMoved,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct AuditEntry {
    pub ts: String,
    pub actor: String,
    /// `key.created`, `key.revoked`, `group.changed`, `model.repriced`, ... ([`Action::name`]; kept as written,
    /// so an entry with a name this version does not know still reads).
    pub action: String,
    /// What was changed: `key app`, `group default`, `model gpt`.
    pub target: String,
    pub before: Value,
    pub after: Value,
    pub request_id: Option<String>,
}

impl AuditEntry {
    pub(crate) fn new(
        actor: &str,
        action: Action,
        target: String,
        before: Value,
        after: Value,
    ) -> AuditEntry {
        AuditEntry {
            ts: rfc3339_millis(unix_millis()),
            actor: actor.to_string(),
            action: action.name().to_string(),
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
pub(crate) struct Trail {
    file: std::fs::File,
    path: PathBuf,
}

impl Trail {
    /// Opens (creating when missing, mode 0600) the audit file in `data_dir`.
    pub(crate) fn open(data_dir: &Path) -> io::Result<Trail> {
        let path = data_dir.join(AUDIT_FILE);
        let opened = crate::util::create_private_dir_all(data_dir).and_then(|()| {
            crate::util::open_owned(&path, std::fs::OpenOptions::new().create(true).append(true))
        });
        match opened {
            Ok(file) => Ok(Trail { file, path }),
            // The refusals of `open_owned` name the file already.
            Err(e) if crate::util::FileRefusal::is(&e) => Err(e),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("cannot open the audit file {}: {e}", path.display()),
            )),
        }
    }

    /// Appends an entry (one line, synced). A failure now, with the change made, is logged at ERROR with
    /// the whole entry (it holds no secret) on the log's must-write path, so the entry is not lost.
    pub(crate) fn write(mut self, entry: &AuditEntry) {
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
pub(crate) fn newest(data_dir: &Path, limit: usize) -> io::Result<Vec<AuditEntry>> {
    let f = match crate::util::open_owned(
        &data_dir.join(AUDIT_FILE),
        std::fs::OpenOptions::new().read(true),
    ) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut all: Vec<AuditEntry> = io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect();
    all.reverse();
    all.truncate(limit);
    Ok(all)
}

/// What the audit trail keeps of a key: never its secret or hash.
pub(crate) fn key_state(r: &crate::access::keys::KeyRecord) -> Value {
    serde_json::json!({"name": r.name, "group": r.group, "credit": r.credit, "disabled": r.disabled,
                       "deleted": r.deleted, "budget": r.budget, "expires": r.expires})
}

/// Makes a key change and records it, in one step: the trail (opened before, so a change it cannot record
/// is not made), the key's state before and after, the action the change is ([`Action::of_key`]); with the
/// keys in a store, the entry also goes to the store's audit list.
pub(crate) fn change_key(
    at: crate::access::key_ops::KeysAt,
    trail: Trail,
    actor: &str,
    name: &str,
    change: &crate::access::key_ops::KeyChange,
) -> Result<crate::access::key_ops::Changed, crate::access::key_ops::KeyOpError> {
    let before = key_in(at, name);
    let changed = crate::access::key_ops::apply(at, name, change)?;
    let after = key_in(at, name);
    let entry = AuditEntry::new(
        actor,
        Action::of_key(change),
        format!("key {name}"),
        before,
        after,
    );
    trail.write(&entry);
    if let crate::access::key_ops::KeysAt::Store(store) = at {
        if let Ok(json) = serde_json::to_string(&entry) {
            if let Err(e) = store.audit_push(&json) {
                log::warn!(
                    "store: the audit entry stays in this instance's audit.jsonl only ({e})"
                );
            }
        }
    }
    Ok(changed)
}

/// A key's state where the keys live (null when there is none).
pub(crate) fn key_in(at: crate::access::key_ops::KeysAt, name: &str) -> Value {
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
            let e = AuditEntry::new(
                ACTOR_CLI,
                Action::KeyCreated,
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

    #[test]
    fn every_action_name_reads_back_and_names_stay_as_written() {
        for a in Action::ALL {
            assert_eq!(Action::from_name(a.name()), Some(a));
        }
        // The names the CLI and the console wrote before they shared this list.
        for old in [
            "key.created",
            "key.revoked",
            "key.enabled",
            "key.deleted",
            "key.rotated",
            "key.credited",
            "key.moved",
            "key.budget_set",
            "key.expiry_set",
            "group.created",
            "group.changed",
            "group.deleted",
            "model.repriced",
            "model.disabled",
            "model.enabled",
        ] {
            assert!(Action::from_name(old).is_some(), "{old}");
        }
        let line = r#"{"ts":"t","actor":"cli","action":"key.renamed","target":"key k","before":null,"after":null,"request_id":null}"#;
        let e: AuditEntry = serde_json::from_str(line).unwrap();
        assert_eq!(e.action, "key.renamed");
        assert_eq!(Action::from_name(&e.action), None);
    }
}
