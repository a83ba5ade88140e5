//! The keys file fails loudly: a file that disappears or is emptied at run time keeps the keys in force
//! (with one ERROR), any rewrite is noticed, `serve --config` mints no key, and writes are atomic, private
//! and never through a symbolic link.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::json;

fn chat(text: &str) -> serde_json::Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": text}]})
}

fn keys_path(gw: &Gateway) -> PathBuf {
    gw.dir.path().join("data").join("keys.jsonl")
}

/// The log lines containing `needle`.
fn lines_with(gw: &Gateway, needle: &str) -> Vec<String> {
    gw.logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(needle))
        .cloned()
        .collect()
}

/// Waits for a log line containing `needle` and returns it.
fn wait_log(gw: &Gateway, needle: &str) -> String {
    wait_for(|| !lines_with(gw, needle).is_empty(), needle);
    lines_with(gw, needle).remove(0)
}

/// Runs the CLI with `--config`: (exit code, stdout, stderr).
fn tollgate(args: &[&str], config: &Path) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A config with the mock model whose `data_dir` is `data`.
fn config_with_data(data: &Path) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n\n[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        data.display()
    )
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_removed_keys_file_keeps_the_keys_until_a_valid_one_returns() {
    let gw = Gateway::start_mock("");
    let path = keys_path(&gw);
    let original = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();

    let line = wait_log(&gw, "has disappeared");
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(
        line.contains("keeping the previous 1 keys in force"),
        "{line}"
    );
    assert_eq!(gw.post("/v1/chat/completions", &chat("still")).status, 200);

    // The file comes back: loaded as usual, and the error was logged once for the one change.
    std::fs::write(&path, &original).unwrap();
    wait_log(&gw, "keys reloaded");
    assert_eq!(
        lines_with(&gw, "has disappeared").len(),
        1,
        "{}",
        gw.all_logs()
    );
    assert_eq!(gw.post("/v1/chat/completions", &chat("back")).status, 200);
}

#[test]
fn an_emptied_keys_file_keeps_the_keys() {
    let gw = Gateway::start_mock("");
    let path = keys_path(&gw);
    std::fs::write(&path, "").unwrap();
    let line = wait_log(&gw, "holds no keys");
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(
        line.contains("keeping the previous 1 keys in force"),
        "{line}"
    );
    assert_eq!(gw.post("/v1/chat/completions", &chat("still")).status, 200);

    // Comments and blank lines only: the same, one more error for this change.
    std::fs::write(&path, "# nothing here\n\n").unwrap();
    wait_for(
        || lines_with(&gw, "holds no keys").len() == 2,
        "the second empty file to be noticed",
    );
    assert_eq!(gw.post("/v1/chat/completions", &chat("still")).status, 200);

    // A key added now makes a valid file again: it is loaded as usual (and only it is in force).
    let new = gw.add_key("after", "default", None);
    assert_eq!(
        gw.post_as(&new, "/v1/chat/completions", &chat("new"))
            .status,
        200
    );
    assert_eq!(
        lines_with(&gw, "holds no keys").len(),
        2,
        "{}",
        gw.all_logs()
    );
}

/// A rewrite in place with the same size and the same modification time is noticed.
#[test]
fn a_same_size_rewrite_in_the_same_second_is_noticed() {
    let gw = Gateway::start_mock("");
    assert_eq!(gw.post("/v1/chat/completions", &chat("before")).status, 200);
    let path = keys_path(&gw);
    let text = std::fs::read_to_string(&path).unwrap();
    let revoked = text.replace("\"disabled\":false", "\"disabled\":true ");
    assert_ne!(revoked, text);
    assert_eq!(revoked.len(), text.len());
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(revoked.as_bytes()).unwrap();
        f.set_modified(mtime).unwrap();
    }
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.modified().unwrap(), mtime);
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&meta), ino);
    wait_for(
        || gw.post("/v1/chat/completions", &chat("after")).status == 401,
        "the revocation to be noticed",
    );
    assert!(gw
        .post("/v1/chat/completions", &chat("after"))
        .text()
        .contains("revoked"));
}

/// `serve --config` without a keys file mints no key: it warns how to add one and refuses requests until
/// one is added.
#[test]
fn serve_with_a_config_and_no_keys_file_mints_no_key() {
    let dir = TempDir::new("nokeys");
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, standard_config(dir.path(), None, "")).unwrap();
    let stdout_path = dir.path().join("stdout.txt");
    let mut child = Command::new(bin())
        .args(["serve", "--config"])
        .arg(&cfg)
        .env_remove("TOLLGATE_LISTEN")
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    {
        let stderr = child.stderr.take().unwrap();
        let logs = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on http://") {
                    let rest = &line[i + "listening on http://".len()..];
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
                logs.lock().unwrap().push(line);
            }
        });
    }
    let addr = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(a) => a.parse().unwrap(),
        Err(_) => {
            let _ = child.kill();
            panic!("tollgate did not start: {:?}", logs.lock().unwrap());
        }
    };
    let made_up = format!("tg_{}", "a".repeat(40));
    let gw = Gateway::adopt(child, addr, made_up, dir, logs);
    // Whatever serve prints on stdout is in the file before it logs that it listens.
    let stdout = std::fs::read_to_string(&stdout_path).unwrap();
    assert!(
        !stdout.lines().any(|l| l.starts_with("tg_")),
        "no key printed: {stdout}"
    );
    assert!(!keys_path(&gw).exists(), "no keys file written");
    let warn = wait_log(&gw, "no API keys");
    assert!(warn.contains("WARN"), "{warn}");
    assert!(
        warn.contains(&format!(
            "tollgate keys add --config {} --name NAME",
            gw.config_path().display()
        )),
        "{warn}"
    );
    assert_eq!(gw.post("/v1/chat/completions", &chat("no")).status, 401);

    let key = gw.add_key("first", "default", None);
    assert_eq!(
        gw.post_as(&key, "/v1/chat/completions", &chat("yes"))
            .status,
        200
    );
    assert_eq!(gw.post("/v1/chat/completions", &chat("no")).status, 401);
}

/// Unmounts a tmpfs when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `keys add` on a full disk fails with a clear error, leaves the keys file as it was and no temporary file.
#[test]
fn a_failed_write_on_a_full_disk_leaves_nothing_behind() {
    let dir = TempDir::new("full");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::piped())
        .output();
    match mounted {
        Ok(o) if o.status.success() => {}
        other => {
            println!(
                "SKIPPED a_failed_write_on_a_full_disk_leaves_nothing_behind: cannot mount a tmpfs \
                 (needs root): {other:?}"
            );
            return;
        }
    }
    let _mount = Mount(mnt.clone()); // dropped before `dir`
    let data = mnt.join("data");
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, config_with_data(&data)).unwrap();
    let (code, _, err) = tollgate(&["keys", "add", "--name", "first"], &cfg);
    assert_eq!(code, 0, "{err}");
    let keys = data.join("keys.jsonl");
    let before = std::fs::read(&keys).unwrap();

    // Fill the filesystem.
    let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    loop {
        if let Err(e) = filler.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(28), "ENOSPC expected: {e}");
            break;
        }
    }
    drop(filler);

    let (code, out, err) = tollgate(&["keys", "add", "--name", "second"], &cfg);
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("tg_"), "no key printed: {out}");
    assert!(
        err.contains("cannot write") && err.contains("keys.jsonl") && err.contains("No space left"),
        "{err}"
    );
    assert_eq!(entries(&data), ["audit.jsonl", "keys.jsonl", "keys.lock"]);
    assert_eq!(std::fs::read(&keys).unwrap(), before);
}

/// A symbolic link planted at keys.jsonl is refused, and the file it points at is left alone.
#[test]
fn a_symlink_at_the_keys_file_is_refused() {
    let dir = TempDir::new("symlink");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let victim = dir.path().join("victim");
    // A target that parses as an (empty) keys file, so only the write can refuse it.
    std::fs::write(&victim, "# precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, data.join("keys.jsonl")).unwrap();
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, config_with_data(&data)).unwrap();
    let (code, out, err) = tollgate(&["keys", "add", "--name", "x"], &cfg);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# precious\n");
    assert!(std::fs::symlink_metadata(data.join("keys.jsonl"))
        .unwrap()
        .file_type()
        .is_symlink());
    // (The audit file is opened before any change, so a change it could not record is never made.)
    assert_eq!(entries(&data), ["audit.jsonl", "keys.jsonl", "keys.lock"]);
    assert_eq!(
        std::fs::read_to_string(data.join("audit.jsonl")).unwrap(),
        ""
    );
}

/// Files and directories tollgate creates are private whatever the umask.
#[test]
fn keys_files_are_private_under_umask_000() {
    let dir = TempDir::new("umask");
    let data = dir.path().join("data");
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, config_with_data(&data)).unwrap();
    let out = Command::new("sh")
        .args([
            "-c",
            "umask 000 && exec \"$0\" keys add --config \"$1\" --name u",
            bin(),
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("keys.jsonl")), 0o600);
    assert_eq!(mode(&data.join("keys.lock")), 0o600);
    // Rewrites keep it so.
    let out = Command::new("sh")
        .args([
            "-c",
            "umask 000 && exec \"$0\" keys revoke --config \"$1\" --name u",
            bin(),
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(mode(&data.join("keys.jsonl")), 0o600);
    assert_eq!(
        mode(&data.join("audit.jsonl")),
        0o600,
        "the audit trail too"
    );
    assert_eq!(entries(&data), ["audit.jsonl", "keys.jsonl", "keys.lock"]);
}
