//! The command line: embedded defaults, `keys add|list|revoke`, `check`, and graceful shutdown on signals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

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

/// Issue 40: scripts read the CLI. `--version`, a `--help` naming the four protocols, and `--json` on the
/// commands that print data, with the fields docs/CLI.md documents (checked here, type by type); `keys add`
/// still prints the key alone as its last line; `tollgate usage` reads the records without a server.
#[test]
fn the_cli_speaks_json_to_scripts() {
    let (code, out, _) = tollgate(&["--version"]);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            format!("tollgate {}", env!("CARGO_PKG_VERSION")).as_str()
        )
    );
    let (_, help, _) = tollgate(&["--help"]);
    for p in [
        "Chat Completions",
        "Responses",
        "Anthropic Messages",
        "Gemini API",
    ] {
        assert!(help.contains(p), "{help}");
    }
    let dir = TempDir::new("cli-json");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, standard_config(dir.path(), None, "")).unwrap();
    let cfg = config.to_str().unwrap();
    let (code, out, err) = tollgate(&[
        "keys", "add", "--config", cfg, "--name", "app", "--credit", "5", "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let made: serde_json::Value = serde_json::from_str(&out).unwrap();
    let key = made["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("tg_"));
    assert_eq!(
        (
            made["name"].as_str(),
            made["group"].as_str(),
            made["credit"].as_f64()
        ),
        (Some("app"), Some("default"), Some(5.0))
    );
    assert!(made["budget"].is_null() && made["expires"].is_null());
    let (_, plain, _) = tollgate(&["keys", "add", "--config", cfg, "--name", "other"]);
    assert!(
        plain.lines().last().unwrap().starts_with("tg_"),
        "the key alone as the last line: {plain}"
    );

    // A request, so that there is a record and a spend.
    let gw = Gateway::restart(
        TempDir(dir.path().to_path_buf()),
        &std::fs::read_to_string(&config).unwrap(),
        &key,
    );
    let r = gw.post_as(
        &key,
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5}),
    );
    assert_eq!(r.status, 200);
    let id = r.header("x-request-id").unwrap().to_string();
    let mut gw = gw;
    gw.keep_dir();
    drop(gw);

    let (code, out, err) = tollgate(&["keys", "list", "--config", cfg, "--json"]);
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let app = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "app")
        .unwrap()
        .clone();
    for (field, ok) in [
        ("group", app["group"].is_string()),
        ("credit", app["credit"].is_number()),
        ("spent", app["spent"].is_number()),
        ("balance", app["balance"].is_number()),
        ("disabled", app["disabled"].is_boolean()),
        ("created", app["created"].is_string()),
        ("expires", app["expires"].is_null()),
        ("budget", app["budget"].is_null()),
    ] {
        assert!(ok, "keys list --json: `{field}` as documented: {app}");
    }
    let spent = app["spent"].as_f64().unwrap();
    assert!(
        (app["balance"].as_f64().unwrap() - (5.0 - spent)).abs() < 1e-9,
        "{app}"
    );
    let (_, table, _) = tollgate(&["keys", "list", "--config", cfg]);
    assert!(
        table.lines().next().unwrap().contains("SPENT") && table.contains("BALANCE"),
        "{table}"
    );

    let (code, out, _) = tollgate(&["usage", "--config", cfg, "--key", "app", "--json"]);
    assert_eq!(code, 0);
    let usage: serde_json::Value = serde_json::from_str(&out).unwrap();
    let recs = usage["data"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "{usage}");
    assert_eq!(recs[0]["request_id"], id.as_str());
    assert!(recs[0]["cost"].is_number() && recs[0]["input_tokens"].is_number());
    let (_, csv, _) = tollgate(&["usage", "--config", cfg, "--request-id", &id, "--csv"]);
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(csv.starts_with("ts,request_id,"), "{csv}");
    let (code, _, err) = tollgate(&["usage", "--config", cfg, "--since", "yesterday"]);
    assert_eq!(code, 2, "{err}");

    let (code, out, _) = tollgate(&["check", "--config", cfg, "--json"]);
    assert_eq!(code, 0);
    let checked: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checked["ok"], true);
    assert!(checked["errors"].as_array().unwrap().is_empty() && checked["models"].is_number());
    std::fs::write(
        &config,
        "[[upstreams]]\nname = 'a'\nkind = 'mock'\nbase_ulr = 'x'\n",
    )
    .unwrap();
    let (code, out, _) = tollgate(&["check", "--config", cfg, "--json"]);
    assert_eq!(code, 1);
    let checked: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checked["ok"], false);
    let e = &checked["errors"][0];
    assert_eq!(
        (e["line"].as_u64(), e["field"].as_str()),
        (Some(4), Some("upstreams[0].base_ulr")),
        "{checked}"
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `base_url`"),
        "{checked}"
    );

    let (code, out, _) = tollgate(&["models", "--json"]);
    assert_eq!(code, 0);
    let models: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = &models["data"][0];
    assert!(
        m["name"].is_string()
            && m["upstreams"].is_array()
            && m["prices"].is_object()
            && m["price_source"].is_string(),
        "{models}"
    );
}
