#!/usr/bin/env bash
# Runs every test: the Rust unit and integration tests (which start the real binary against fake upstreams),
# then the compatibility suite with the official OpenAI and Anthropic Python SDKs (in .venv, created on the
# first run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

echo "== cargo test" >&2
cargo test --quiet

echo "== SDK compatibility tests (tests/sdk)" >&2
TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate" bash scripts/sdk-tests.sh
