//! Running it for real: the systemd unit in `contrib/` passes `systemd-analyze verify` without a warning
//! (pointed at the binary under test), its config passes `tollgate check`, and the nginx example keeps
//! streams unbuffered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::process::Command;

use common::*;

fn contrib(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_systemd_unit_verifies() {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    if analyze.is_err() {
        eprintln!(
            "SKIPPED: systemd-analyze is not installed (Debian package `systemd`; .ci/run installs it)"
        );
        return;
    }
    let unit = contrib("tollgate.service");
    for needed in [
        "User=tollgate",
        "EnvironmentFile=/etc/tollgate/tollgate.env",
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        "StateDirectory=tollgate",
        "ExecStart=/usr/local/bin/tollgate serve --config /etc/tollgate/tollgate.toml",
    ] {
        assert!(unit.contains(needed), "the unit lacks {needed}");
    }
    let dir = TempDir::new("deploy-unit");
    let path = dir.path().join("tollgate.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/local/bin/tollgate",
            &format!("ExecStart={}", bin()),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed: {err}");
    let own: Vec<&str> = err.lines().filter(|l| l.contains("tollgate")).collect();
    assert!(own.is_empty(), "warnings about the unit: {own:?}");
}

#[test]
fn the_service_config_passes_check_and_stops_in_time() {
    let dir = TempDir::new("deploy-config");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, contrib("tollgate.toml")).unwrap();
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The unit's stop timeout outlasts the grace period, the cut and the ledger's close.
    let unit = contrib("tollgate.service");
    let stop: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .unwrap()
        .parse()
        .unwrap();
    let grace: u64 = contrib("tollgate.toml")
        .lines()
        .find_map(|l| l.strip_prefix("shutdown_grace_secs = "))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(stop > grace + 15, "TimeoutStopSec={stop} vs grace {grace}");
}

#[test]
fn the_nginx_example_keeps_streams_unbuffered() {
    let conf = contrib("nginx.conf");
    for needed in [
        "proxy_buffering off",
        "proxy_http_version 1.1",
        "proxy_set_header Connection \"\"",
        "proxy_read_timeout",
        "proxy_pass http://127.0.0.1:8080",
    ] {
        assert!(conf.contains(needed), "nginx.conf lacks {needed}");
    }
}
