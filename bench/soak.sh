#!/usr/bin/env bash
# Soak test (not part of scripts/test.sh): mixed traffic with injected faults against a fake upstream
# for SECONDS (default 300), then a request-by-request check of the usage ledger. See bench/soak.rs.
#
#   bench/soak.sh [SECONDS] [--clients 32] [--seed 1] [--keep] [--mix Kind=weight,…]
#
# Exit status 0 when every outcome matched the plan and the ledger matched the responses.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-300}"
[ $# -gt 0 ] && shift
cargo build --release --bin tollgate
cargo build --release -p tollgate-bench --bin fake-upstream --bin soak
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
mkdir -p target/bench
out="target/bench/soak-$(date -u +%Y%m%dT%H%M%SZ).txt"
set +e
target/release/soak --duration "$secs" "$@" | tee "$out"
status=${PIPESTATUS[0]}
echo "(raw output saved to $out)"
exit "$status"
