#!/usr/bin/env bash
# tollgate's benchmark suite, in one command: builds the release binaries (tollgate and the bench
# programs of the workspace member in bench/), then runs every phase against a fake upstream on this machine and prints the
# figures, each set against the direct path, and a summary against the targets (docs/PERFORMANCE.md).
# About 5 minutes on 2 CPUs after the build.
#
#   bench/run.sh                  the full suite
#   bench/run.sh --compare REV [PHASES...]
#                                 the same phases on the build of commit REV first, then on this tree, in one
#                                 sitting (the previous version side by side)
#   bench/run.sh --quick          short runs, to try it out (not for the record)
#   bench/run.sh --only request,streaming
#                                 some phases: footprint (size, cold start), request (request/response),
#                                 wrk, accounting (access + accounting), streaming, sustained, logging,
#                                 many-streams (1,000 streams), store (flat files vs a local redis-server),
#                                 embeddings (against chat passthrough),
#                                 offline (ledger replay, microbenchmark);
#                                 the letters of earlier reports (d a w e b s l c; r for store) still work
#
# wrk (Debian package `wrk`) is used for a cross-check when it is installed, and redis-server (package
# `redis-server`) for the store phase; nothing else is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
# tollgate and the benchmark programs (the workspace member tollgate-bench: bench/Cargo.toml).
cargo build --release --bin tollgate
cargo build --release -p tollgate-bench --bin fake-upstream --bin bench-suite --bin bench-micro \
  --bin ledger-replay --bin loadgen
# 1,000 concurrent streams need about 3,500 descriptors in tollgate and 1,000 in each of the others.
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
mkdir -p target/bench
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
if [ "${1:-}" = "--compare" ]; then
  rev="$2"
  shift 2
  src="target/compare/src"
  rm -rf "$src" && mkdir -p "$src"
  git archive "$rev" | tar -x -C "$src"
  cargo build --release --bin tollgate --manifest-path "$src/Cargo.toml" --target-dir target/compare
  out="target/bench/suite-$stamp-$rev.txt"
  echo "# tollgate at $rev ($(git rev-parse --short "$rev"))"
  BENCH_TOLLGATE=target/compare/release/tollgate target/release/bench-suite "$@" | tee "$out"
  echo "(raw output saved to $out)"
  echo
  echo "# tollgate of this tree"
fi
out="target/bench/suite-$stamp.txt"
target/release/bench-suite "$@" | tee "$out"
echo "(raw output saved to $out)"
