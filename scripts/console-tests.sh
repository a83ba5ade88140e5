#!/usr/bin/env bash
# Runs the operator console's browser test (tests/console/console.test.mjs): headless Chromium (Debian's
# `chromium` package, /usr/bin/chromium) driven by playwright-core signs in to /console and works every view
# against a real tollgate, which makes requests through the gateway on the way. Screenshots of each view go to
# test-artifacts/console/.
#
# Installs tests/console/node_modules with `npm ci` when missing or when package-lock.json changed; builds
# tollgate (cargo build) unless TOLLGATE_BIN names a binary. Starts two gateways in a temporary directory:
# one with an admin token (the mock model, priced so requests cost credits) and one without (its admin API is
# closed), runs the test, and stops both. Exits 1 when the test fails, 2 on a setup error.
#
# Environment:
#   TOLLGATE_BIN          tollgate binary to test (default: cargo build, then target/debug/tollgate)
#   CHROMIUM              the browser (default /usr/bin/chromium; Debian: apt-get install chromium)
#   CONSOLE_TESTS_KEEP=1  keep the temporary directory (configs, data, logs) even when the test passed
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
console_dir="$root/tests/console"
artifacts="$root/test-artifacts/console"
chromium="${CHROMIUM:-/usr/bin/chromium}"
admin_token="console-test-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"

# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
say() { echo "console-tests: $*" >&2; }
die() {
    say "error: $*"
    exit 2
}

command -v node >/dev/null || die "node is needed (playwright-core)"
[ -x "$chromium" ] || die "no Chromium at $chromium (Debian: apt-get install chromium; .ci/run installs it)"

# ------------------------------------------------------------------------------------ install playwright

force=0
if [ ! -d "$console_dir/node_modules/playwright-core" ]; then force=1; fi
npm_ci_if_changed "$console_dir" "playwright-core" "$force"

# ------------------------------------------------------------------------------------- build tollgate

if [ -z "${TOLLGATE_BIN:-}" ]; then
    say "building tollgate (cargo build)"
    (cd "$root" && cargo build --quiet)
    TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate"
fi
[ -x "$TOLLGATE_BIN" ] || die "no tollgate binary at $TOLLGATE_BIN"

# ------------------------------------------------------------------------------------ start the gateways

out="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-console-tests.XXXXXX")"
gateway_pid=""
closed_pid=""
fake_pid=""
passed=0
cleanup() {
    local pid
    for pid in "$gateway_pid" "$closed_pid" "$fake_pid"; do
        if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
    done
    for pid in "$gateway_pid" "$closed_pid" "$fake_pid"; do
        if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
    done
    gateway_pid=""
    closed_pid=""
    fake_pid=""
    if [ "$passed" = 1 ] && [ "${CONSOLE_TESTS_KEEP:-0}" != 1 ]; then
        rm -rf "$out"
    else
        say "files kept in $out"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fake Anthropic upstream (tests/console/fake-upstream.mjs) whose answers report cache reads and writes
# split by lifetime, behind the model `claude-cached` (list prices: its upstream model is in the table).
node "$console_dir/fake-upstream.mjs" "$out/fake.port" >"$out/fake.log" 2>&1 &
fake_pid=$!
fake_port="$(wait_for "$out/fake.port" 's/^\([0-9][0-9]*\)$/\1/p' "$fake_pid")" ||
    die "the fake upstream did not start: $(tail -5 "$out/fake.log")"

# write_config DIR: a gateway on a free port with the mock model, priced so that requests cost credits (and
# the same with its answers cached), and the fake upstream's model at list prices.
write_config() {
    mkdir -p "$1"
    cat >"$1/tollgate.toml" <<EOF
# Written by scripts/console-tests.sh.
listen = "127.0.0.1:0"
data_dir = "$1/data"
admin_token_env = "TG_CONSOLE_ADMIN"
shutdown_grace_secs = 2

[[upstreams]]
name = "mock"
kind = "mock"

[[models]]
name = "mock"
upstream = "mock"
input_price = 1000000.0
output_price = 2000000.0

[[models]]
name = "mock-cached"
upstream = "mock"
input_price = 1000000.0
output_price = 2000000.0
cache_ttl_secs = 600

[[upstreams]]
name = "fake-anthropic"
kind = "anthropic"
base_url = "http://127.0.0.1:$fake_port"

[[models]]
name = "claude-cached"
upstream = "fake-anthropic"
upstream_model = "claude-haiku-5-5"

[[groups]]
name = "default"
models = ["*"]
EOF
}

write_config "$out/gateway"
# `serve --config` mints no key: make the first key before the start (group "default", the first group).
first_key="$(add_key "$out/gateway/tollgate.toml" default default)" || die "tollgate keys add failed"
env -u TOLLGATE_LISTEN TG_CONSOLE_ADMIN="$admin_token" \
    "$TOLLGATE_BIN" serve --config "$out/gateway/tollgate.toml" >"$out/gateway/stdout.log" 2>"$out/gateway/stderr.log" &
gateway_pid=$!

# The same without the admin token: its admin API refuses every call (403 admin_disabled).
write_config "$out/closed"
env -u TOLLGATE_LISTEN -u TG_CONSOLE_ADMIN \
    "$TOLLGATE_BIN" serve --config "$out/closed/tollgate.toml" >"$out/closed/stdout.log" 2>"$out/closed/stderr.log" &
closed_pid=$!

listen_expr='s|.*listening on http://\([0-9.:]*\).*|\1|p'
gateway_addr="$(wait_for "$out/gateway/stderr.log" "$listen_expr" "$gateway_pid")" ||
    die "tollgate did not start: $(tail -5 "$out/gateway/stderr.log")"
closed_addr="$(wait_for "$out/closed/stderr.log" "$listen_expr" "$closed_pid")" ||
    die "the second tollgate (no admin token) did not start: $(tail -5 "$out/closed/stderr.log")"
say "tollgate on $gateway_addr, without admin token on $closed_addr; $("$chromium" --version 2>/dev/null | head -1)"

# ------------------------------------------------------------------------------------------ the test

mkdir -p "$artifacts"
rm -f "$artifacts"/*.png
status=0
CONSOLE_URL="http://$gateway_addr" CONSOLE_CLOSED_URL="http://$closed_addr" CONSOLE_ADMIN_TOKEN="$admin_token" \
    CONSOLE_FIRST_KEY="$first_key" CONSOLE_ARTIFACTS="$artifacts" CHROMIUM="$chromium" CONSOLE_TMP="$out" \
    node "$console_dir/console.test.mjs" || status=$?

if [ "$status" -ne 0 ]; then
    say "the browser test failed; the gateway's last log lines:"
    tail -15 "$out/gateway/stderr.log" >&2 || true
    exit 1
fi
passed=1
say "screenshots in ${artifacts#"$root"/}/"
