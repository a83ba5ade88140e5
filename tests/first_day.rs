//! The first day's rough edges, each through the real binary: a key works the moment `keys add` returns (one
//! instance, and two on a real `redis-server`); a busy port costs no key; an upstream whose host does not
//! resolve says so; the small texts say what they mean.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::process::Command;

use common::redis::Redis;
use common::*;
use serde_json::json;

fn chat() -> serde_json::Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]})
}

/// `tollgate keys add` on `config`; returns the key (the last line of stdout) and the whole stdout.
fn keys_add(config: &std::path::Path, args: &[&str]) -> (String, String) {
    let out = Command::new(bin())
        .args(["keys", "add", "--config"])
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "keys add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = stdout.lines().last().unwrap_or("").to_string();
    (key, stdout)
}

#[test]
fn a_key_works_the_moment_keys_add_returns() {
    let gw = Gateway::spawn_mock("");
    for i in 0..5 {
        let name = format!("fresh-{i}");
        let (key, _) = keys_add(&gw.config_path(), &["--name", &name, "--group", "default"]);
        // No wait: the first request right after the command returned.
        let r = gw.post_as(&key, "/v1/chat/completions", &chat());
        assert_eq!(r.status, 200, "key {name} at once: {}", r.text());
    }
    // A wrong key is still refused (after its one look at the file).
    let r = gw.post_as(
        "tg_0000000000000000000000000000000000000000",
        "/v1/chat/completions",
        &chat(),
    );
    assert_eq!(r.status, 401);
}

/// Two instances on one Redis: a key made through instance A's config (the store) works on B at once. (And
/// `check --connect` says that this Redis keeps its data across a restart, as docs/CLUSTER.md promises.)
#[test]
fn a_key_made_on_one_instance_works_on_the_other_at_once() {
    let redis = Redis::start(true);
    let config = |dir: &std::path::Path, name: &str| {
        let mut c = base_config(dir, &format!("instance = \"{name}\""));
        c.push_str(
            "[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n[[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n\
             [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n",
        );
        c.push_str(&redis.store_section(""));
        c
    };
    let dir_a = TempDir::new("fd-a");
    let ca = config(dir_a.path(), "fd-a");
    let a = Gateway::spawn_with(dir_a, &ca);
    let dir_b = TempDir::new("fd-b");
    let cb = config(dir_b.path(), "fd-b");
    let b = Gateway::respawn(dir_b, &cb, &a.key);
    for i in 0..5 {
        let name = format!("shared-{i}");
        let (key, _) = keys_add(&a.config_path(), &["--name", &name, "--group", "default"]);
        let r = b.post_as(&key, "/v1/chat/completions", &chat());
        assert_eq!(r.status, 200, "key {name} on B at once: {}", r.text());
        let r = a.post_as(&key, "/v1/chat/completions", &chat());
        assert_eq!(r.status, 200, "key {name} on A at once: {}", r.text());
    }
    let (code, out, err) = a.cli(&["check", "--connect"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("keeps its data across a restart"), "{out}");
}

#[test]
fn a_busy_port_costs_no_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = TempDir::new("fd-port");
    let out = Command::new(bin())
        .arg("serve")
        .current_dir(dir.path())
        .env("TOLLGATE_LISTEN", &addr)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("tg_"),
        "a start that could not listen minted a key: {stdout}"
    );
    assert!(
        !dir.path().join("tollgate-data/keys.jsonl").exists(),
        "a start that could not listen wrote a keys file"
    );
    // The retry on a free port prints the first key.
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .current_dir(dir.path())
        .env("TOLLGATE_LISTEN", "127.0.0.1:0");
    let gw = Gateway::start_command(TempDir::new("fd-port-unused"), &mut cmd);
    assert!(gw.key.starts_with("tg_"));
    let r = gw.post_as(&gw.key.clone(), "/v1/chat/completions", &chat());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn an_upstream_whose_host_does_not_resolve_says_so() {
    let dir = TempDir::new("fd-dns");
    let mut c = base_config(
        dir.path(),
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""),
    );
    c.push_str(
        r#"
[[upstreams]]
name = "nowhere"
kind = "openai-chat"
base_url = "http://no-such-host.invalid:9/v1"

[[models]]
name = "far"
upstream = "nowhere"

[[groups]]
name = "default"
models = ["*"]
"#,
    );
    let gw = Gateway::spawn_with(dir, &c);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "far", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("name not found"), "{msg}");
    assert!(msg.contains("nowhere"), "{msg}");
    // The host is the operator's to see (log and record), not the client's.
    assert!(!msg.contains("no-such-host.invalid"), "{msg}");
    let rid = r.header("x-request-id").unwrap().to_string();
    let line = gw.log_line(&rid);
    assert!(line.contains("name not found"), "{line}");
    assert!(line.contains("no-such-host.invalid"), "{line}");
    let usage = gw.admin("/admin/usage?limit=1").json();
    let err = usage["data"][0]["error"].as_str().unwrap_or("");
    assert!(
        err.contains("name not found") && err.contains("no-such-host.invalid:9"),
        "{usage}"
    );
}

#[test]
fn small_texts_say_what_they_mean() {
    let gw = Gateway::spawn_mock("");
    // Singular and plural.
    let (code, out, err) = gw.cli(&["check"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(1 upstream, 1 model, 1 group;"), "{out}");
    // keys add confirms the budget and the expiry it set.
    let (_, out) = keys_add(
        &gw.config_path(),
        &[
            "--name",
            "budgeted",
            "--group",
            "default",
            "--budget",
            "5",
            "--period",
            "daily",
            "--expires",
            "2031-01-02T03:04:05Z",
        ],
    );
    assert!(out.contains("budget: 5"), "{out}");
    assert!(out.contains("daily"), "{out}");
    assert!(out.contains("expires: 2031-01-02T03:04:05Z"), "{out}");
    // keys move to a group that does not exist lists those that do.
    let (code, _, err) = gw.cli(&["keys", "move", "--name", "budgeted", "--group", "nosuch"]);
    assert_ne!(code, 0);
    assert!(err.contains("nosuch") && err.contains("[default]"), "{err}");
    // doctor's header keeps a space after its longest label.
    let out = Command::new(bin())
        .args(["doctor", "--base-url"])
        .arg(format!("http://{}", gw.addr))
        .args(["--key", &gw.key, "--model", "mock"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("local servers"))
        .unwrap_or_else(|| panic!("no local servers line: {text}"));
    assert!(line.contains("local servers "), "{line}");
}

/// The README's way to try a config with no model at hand: the fake upstream example, behind the gateway.
/// (`cargo test` builds the examples; a run of this file alone may not have, and says so.)
#[test]
fn the_fake_upstream_of_the_readme_answers_through_the_gateway() {
    let exe = std::path::Path::new(bin())
        .parent()
        .unwrap()
        .join("examples/fake-upstream");
    if !exe.exists() {
        eprintln!(
            "SKIPPED: {} is not built (`cargo test` builds it)",
            exe.display()
        );
        return;
    }
    let mut fake = Command::new(&exe)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(fake.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.trim().rsplit("http://").next().unwrap().to_string();
    let dir = TempDir::new("fd-fake");
    let mut c = base_config(dir.path(), "");
    c.push_str(&format!(
        "[[upstreams]]\nname = \"fake\"\nkind = \"openai-chat\"\nbase_url = \"http://{addr}/v1\"\n\n\
         [[models]]\nname = \"any-model\"\nupstream = \"fake\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n"
    ));
    let gw = Gateway::spawn_with(dir, &c);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "any-model", "messages": [{"role": "user", "content": "hi"}]}),
    );
    let _ = fake.kill();
    let _ = fake.wait();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["choices"][0]["message"]["content"].is_string());
}

/// Issue 40: the console works on the first run, with no restart. `tollgate serve` on the embedded defaults
/// (no `admin_token_env`, no `TOLLGATE_ADMIN_TOKEN`) makes an admin token, keeps only its SHA-256 in the
/// data directory, and prints it once with the console's address; it opens the admin API. `tollgate
/// admin-token rotate` replaces it on the running server; a second start prints none.
#[test]
fn the_first_start_prints_an_admin_token_the_console_takes() {
    let dir = TempDir::new("first-admin");
    let start = |dir: &TempDir, run: &str, key: Option<&str>| {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .current_dir(dir.path())
            .env("TOLLGATE_LISTEN", "127.0.0.1:0")
            .env("TOLLGATE_DISCOVER", "off");
        // The gateway's own scratch directory (removed when it is dropped); the data stays in `dir`.
        let scratch = dir.path().join(run);
        std::fs::create_dir_all(&scratch).unwrap();
        match key {
            None => Gateway::start_command(TempDir(scratch), &mut cmd),
            Some(k) => Gateway::restart_command(TempDir(scratch), &mut cmd, k),
        }
    };
    let gw = start(&dir, "first", None);
    wait_for(
        || {
            gw.printed
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.starts_with("tgadm_"))
        },
        "the admin token printed",
    );
    let printed = gw.printed.lock().unwrap().clone();
    let at = printed
        .iter()
        .position(|l| l.starts_with("tgadm_"))
        .unwrap();
    let token = printed[at].clone();
    assert!(
        printed[at - 1].contains(&format!("http://{}/console", gw.addr)),
        "{printed:?}"
    );
    let kept = std::fs::read_to_string(dir.path().join("tollgate-data/admin-token")).unwrap();
    assert!(!kept.contains(&token), "only the hash is kept");
    let admin = |t: &str| {
        gw.request(
            "GET",
            "/admin/keys",
            &[("authorization", &format!("Bearer {t}"))],
            b"",
        )
        .status
    };
    assert_eq!(admin(&token), 200);
    assert_eq!(admin(&gw.key), 401, "an API key is no admin token");
    // Rotated with the server running: the new one works at once, the old one no more.
    let out = Command::new(bin())
        .args(["admin-token", "rotate"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let rotated = stdout.lines().last().unwrap().to_string();
    assert!(
        rotated.starts_with("tgadm_") && rotated != token,
        "{stdout}"
    );
    assert_eq!(admin(&rotated), 200);
    assert_eq!(admin(&token), 401);
    let key = gw.key.clone();
    drop(gw);
    // A second start makes none.
    let gw = start(&dir, "second", Some(&key));
    assert_eq!(admin_status(&gw, &rotated), 200);
    assert!(
        !gw.printed
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("tgadm_")),
        "printed only once"
    );
}

fn admin_status(gw: &Gateway, token: &str) -> u16 {
    gw.request(
        "GET",
        "/admin/keys",
        &[("authorization", &format!("Bearer {token}"))],
        b"",
    )
    .status
}
