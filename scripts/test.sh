#!/usr/bin/env bash
# Runs every test: the Rust unit and integration tests (which start the real server, in-process or as the binary, against fake upstreams,
# and several instances on real redis-server processes, a primary with a replica and three sentinels among them),
# the compatibility suite with the official OpenAI, Anthropic and Google SDKs (Python in .venv, created on the
# first run; Google's Node SDK in tests/sdk/node/node_modules), and the real coding agents Claude Code, Codex
# CLI and Gemini CLI (npm packages in tests/agents/node_modules, installed on the first run) against every
# upstream kind, and the operator console in headless Chromium
# (playwright-core in tests/console/node_modules, installed on the first run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Everything the stages need, checked before any of them runs: what is missing is listed with how to get it.
missing=()
command -v cargo >/dev/null || missing+=("Rust (cargo): https://rustup.rs, then open a new shell")
if ! command -v python3 >/dev/null; then
    missing+=("Python 3: apt-get install python3 python3-venv")
elif ! python3 -m venv --help >/dev/null 2>&1; then
    missing+=("Python's venv module: apt-get install python3-venv")
fi
command -v node >/dev/null || missing+=("Node.js: apt-get install nodejs npm (or https://nodejs.org)")
command -v npm >/dev/null || missing+=("npm: apt-get install npm")
command -v redis-server >/dev/null || missing+=("redis-server (the tests of several instances start real Redis servers, and tests/sentinel.rs a primary, a replica and three sentinels with redis-server --sentinel): apt-get install redis-server")
chromium="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || missing+=("Chromium at $chromium: apt-get install chromium (or set CHROMIUM to a Chromium binary)")
if [ "${#missing[@]}" -gt 0 ]; then
    echo "scripts/test.sh: missing what the tests need (nothing was run):" >&2
    for m in "${missing[@]}"; do echo "  - $m" >&2; done
    echo "(.ci/run installs the Debian packages by itself; the first run also downloads about 0.9 GB of npm" >&2
    echo " packages and Python SDKs into tests/agents, tests/console, tests/sdk/node and .venv.)" >&2
    exit 1
fi

echo "== cargo test" >&2
cargo test --quiet

echo "== SDK compatibility tests (tests/sdk)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/sdk-tests.sh

echo "== real coding agents through tollgate: Claude Code, Codex CLI and Gemini CLI (tests/agents)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/agent-tests.sh

echo "== operator console in headless Chromium (tests/console)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/console-tests.sh
