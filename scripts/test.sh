#!/usr/bin/env bash
# Runs every test: the Rust unit and integration tests (which start the real binary against fake upstreams),
# the compatibility suite with the official OpenAI and Anthropic Python SDKs (in .venv, created on the first
# run), and the real coding agents Claude Code and Codex CLI (npm packages in tests/agents/node_modules,
# installed on the first run) against every upstream kind, and the operator console in headless Chromium
# (playwright-core in tests/console/node_modules, installed on the first run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

echo "== cargo test" >&2
cargo test --quiet

echo "== SDK compatibility tests (tests/sdk)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/sdk-tests.sh

echo "== real coding agents through tollgate: Claude Code and Codex CLI (tests/agents)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/agent-tests.sh

echo "== operator console in headless Chromium (tests/console)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/console-tests.sh
