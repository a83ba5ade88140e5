//! The command line: embedded defaults, `keys add|list|revoke`, `check`, and graceful shutdown on signals.

mod common;

use std::io::BufReader;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn tollgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tollgate serve` with no config: mock model, `./tollgate-data`, a first key printed once.
#[test]
fn embedded_defaults_answer_with_the_mock_model() {
    let dir = TempDir::new("defaults");
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .current_dir(dir.path())
        .env("TOLLGATE_LISTEN", "127.0.0.1:0");
    let data = dir.path().join("tollgate-data");
    let gw = Gateway::start_command(TempDir(dir.path().to_path_buf()), &mut cmd);
    std::mem::forget(dir); // owned by the gateway now
    assert!(gw.key.starts_with("tg_") && gw.key.len() == 43);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "hello"}]}),
    );
    assert_eq!(r.status, 200);
    assert!(r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("hello"));
    let keys = std::fs::read_to_string(data.join("keys.jsonl")).unwrap();
    assert!(keys.contains("sha256:"));
    assert!(!keys.contains(&gw.key[3..]), "only the hash is stored");

    // A second start keeps the key and prints none.
    let mut gw = gw;
    let _ = gw.child().kill();
    let _ = gw.child().wait();
    let out = Command::new(bin())
        .arg("serve")
        .current_dir(gw.dir.path())
        .env("TOLLGATE_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut out = out;
    let _ = out.kill();
    let output = out.wait_with_output().unwrap();
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("tg_"),
        "no second key"
    );
}

#[test]
fn keys_add_list_revoke() {
    let gw = Gateway::spawn_mock("");
    let cfg = gw.config_path();
    let cfg = cfg.to_str().unwrap();
    let (code, out, err) = tollgate(&[
        "keys", "add", "--config", cfg, "--name", "ci-bot", "--group", "default",
    ]);
    assert_eq!(code, 0, "{err}");
    let key = out.lines().last().unwrap().to_string();
    assert!(
        key.starts_with("tg_"),
        "the key is the last line of stdout: {out}"
    );
    let stored = std::fs::read_to_string(gw.dir.path().join("data/keys.jsonl")).unwrap();
    assert!(!stored.contains(&key[3..]));

    // The running server picks the new key up without a restart.
    let body =
        json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let auth = format!("Bearer {key}");
    let status = |gw: &Gateway| {
        gw.request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", &auth)],
            body.as_bytes(),
        )
        .status
    };
    wait_until(|| status(&gw) == 200, "the new key to work");

    let (code, out, _) = tollgate(&["keys", "list", "--config", cfg]);
    assert_eq!(code, 0);
    assert!(out.contains("ci-bot") && out.contains("active"), "{out}");
    assert!(!out.contains(&key[3..]), "list never shows keys");

    // Duplicate name, unknown group: refused with the field named.
    let (code, _, err) = tollgate(&[
        "keys", "add", "--config", cfg, "--name", "ci-bot", "--group", "default",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--name"), "{err}");
    let (code, _, err) = tollgate(&[
        "keys", "add", "--config", cfg, "--name", "x", "--group", "nope",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--group") && err.contains("nope"), "{err}");

    // Revoke: refused within 2 s on the running server.
    let (code, _, err) = tollgate(&["keys", "revoke", "--config", cfg, "--name", "ci-bot"]);
    assert_eq!(code, 0, "{err}");
    let revoked_at = Instant::now();
    wait_until(|| status(&gw) == 401, "the revoked key to be refused");
    assert!(revoked_at.elapsed() < Duration::from_secs(10));
    let (_, out, _) = tollgate(&["keys", "list", "--config", cfg]);
    assert!(out.contains("revoked"));
    let (code, _, err) = tollgate(&["keys", "revoke", "--config", cfg, "--name", "ghost"]);
    assert_eq!(code, 1);
    assert!(err.contains("ghost"));
}

fn wait_until(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn check_names_the_bad_field() {
    let dir = TempDir::new("check");
    let path = dir.path().join("c.toml");
    let p = path.to_str().unwrap();
    let cases = [
        ("[[upstreams]]\nname = \"a\"\nkind = \"mock\"\n[[models]]\nname = \"m\"\nupstream = \"b\"\n", "models[0].upstream"),
        ("[[upstreams]]\nname = \"a\"\nkind = \"grpc\"\n", "upstreams[0].kind"),
        ("listen = \"nowhere\"\n", "listen"),
        ("workers = 0\n[[upstreams]]\nname = \"a\"\nkind = \"mock\"\n[[models]]\nname = \"m\"\nupstream = \"a\"\n", "workers"),
        ("[[upstreams]]\nname = \"a\"\nkind = \"openai-chat\"\nbase_url = \"ftp://x\"\n", "upstreams[0].base_url"),
        ("[[upstreams]]\nname = \"a\"\nkind = \"mock\"\n", "models"),
        ("nonsense = 1\n", "nonsense"),
        ("[[upstreams]\n", "invalid TOML"),
    ];
    for (text, field) in cases {
        std::fs::write(&path, text).unwrap();
        let (code, _, err) = tollgate(&["check", "--config", p]);
        assert_eq!(code, 1, "{text}");
        assert!(err.contains(field), "expected {field:?} in {err:?}");
        assert!(
            err.contains("expected") || err.contains("unknown"),
            "says what was expected: {err}"
        );
    }
    std::fs::write(&path, standard_config(dir.path(), None, "")).unwrap();
    let (code, out, err) = tollgate(&["check", "--config", p]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("OK"));
}

/// SIGTERM stops accepting, lets the stream in flight finish, then exits 0. SIGINT likewise.
#[test]
fn sigterm_and_sigint_drain_in_flight_streams() {
    for sig in ["TERM", "INT"] {
        let dir = TempDir::new("drain");
        let config = standard_config(dir.path(), None, "")
            .replace("kind = \"mock\"", "kind = \"mock\"\nmock_delay_ms = 100");
        let mut gw = Gateway::spawn_with(dir, &config);
        let mut s = gw.connect();
        let auth = format!("Bearer {}", gw.key);
        let body = json!({"model": "mock", "stream": true, "messages": [{"role": "user", "content": "a longer question so the answer has many deltas"}]});
        send_request(
            &mut s,
            "POST",
            "/v1/chat/completions",
            &[("authorization", &auth)],
            body.to_string().as_bytes(),
            true,
        );
        let mut r = BufReader::new(s);
        let (status, _) = read_head(&mut r);
        assert_eq!(status, 200);
        let first = read_chunk(&mut r).unwrap();
        assert!(String::from_utf8_lossy(&first).contains("assistant"));
        signal(gw.pid(), sig);
        // The stream still completes.
        let mut rest = String::new();
        while let Some(c) = read_chunk(&mut r) {
            rest.push_str(&String::from_utf8_lossy(&c));
        }
        assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
        let code = wait_exit(gw.child(), Duration::from_secs(30));
        assert_eq!(code, Some(0), "{}", gw.all_logs());
        // Nothing listens any more.
        assert!(std::net::TcpStream::connect(gw.addr).is_err());
    }
}
