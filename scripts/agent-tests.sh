#!/usr/bin/env bash
# Runs the real coding agents against tollgate: Claude Code (`claude -p`, Anthropic Messages), Codex CLI
# (`codex exec`, OpenAI Responses) and Gemini CLI (`gemini -p`, the Gemini API), each once per upstream kind,
# with a fake upstream behind tollgate.
#
#   scripts/agent-tests.sh                              all twenty-eight runs (agent x kind; plain, :tool, :ns)
#   scripts/agent-tests.sh claude:messages codex:responses gemini:gemini   only these (the passthrough pairs)
#   scripts/agent-tests.sh claude codex:tool            claude's four plain runs, codex's four tool runs
#   scripts/agent-tests.sh --list                       every run name
#   scripts/agent-tests.sh --latest codex               the newest published versions instead of the pinned
#                                                        ones (also AGENTS_LATEST=1)
#
# Run names are AGENT:KIND, AGENT:KIND:tool or codex:KIND:ns, AGENT claude, codex or gemini, KIND one of
#   messages | chat | responses | gemini   the agent talks to tollgate, whose model agent-KIND points at the
#                                 fake upstream's Anthropic / Chat Completions / Responses / Gemini API endpoint
#   mock                          the agent talks to tollgate's built-in mock model (no upstream; plain only)
#   direct                        the agent talks to the fake upstream itself, no tollgate: records exactly
#                                 what the agent sends (headers, query, body) in upstream-requests.jsonl
# Shorthands: claude, codex, gemini (an agent's four plain gateway runs), claude:tool, codex:tool,
# gemini:tool (its four tool runs), codex:ns (its four namespace runs), plain, tool, ns, all. The default is
# all: the twenty-eight gateway runs (twelve plain, twelve tool, four namespace).
#
# A plain run asks "Reply with the word ready"; it passes when the agent exits 0 within the timeout and
# prints the answer only the fake upstream produces ("AGENT-OK from <kind> upstream"; for mock, tollgate's
# mock text), and the fake upstream got the request on the right protocol with the upstream model and the
# upstream key (never the client's tollgate key). A :tool run makes a full tool round trip: the fake upstream
# first answers with a call of the agent's own file-reading tool (Claude Code: Read; Codex: exec_command
# `cat`; Gemini CLI: read_file) on a file holding a random MARKER, then, once the tool result comes back, with
# "AGENT-OK from <kind> upstream; the tool said MARKER-..." which the agent must print. A codex :ns run
# checks a namespaced tool's round trip: the fake upstream calls close_agent from Codex's multi_agent_v1
# namespace (tollgate flattens namespaces for Chat, Messages and Gemini upstreams and must restore them), and Codex
# must have routed the call to that tool ("AGENT-OK from <kind> upstream; the namespaced tool was routed").
# Runs go one at a time. The script prints a summary table and "N passed, N failed"; it exits 1 if any run
# failed, 2 on a usage or setup error.
#
# Installs tests/agents/node_modules with `npm ci` when missing or when package-lock.json changed (the
# pinned versions of package.json, which keep CI reproducible); with --latest, the newest published
# versions instead, with `npm install` into tests/agents/latest (not committed; agents move weekly, so run
# this before a release). Builds tollgate (cargo build) unless TOLLGATE_BIN names a binary. Needs node/npm
# and python3.
#
# Environment:
#   TOLLGATE_BIN          tollgate binary to test (default: cargo build, then target/debug/tollgate)
#   AGENT_TIMEOUT         seconds per agent run (default 120)
#   AGENT_MAX_RETRIES     retries the agents make on HTTP errors (default 1, so 5xx failures end quickly)
#   AGENT_PROMPT          the prompt (default "Reply with the word ready")
#   AGENT_TESTS_OUT       directory for configs, logs and records (default: a new temporary directory, removed
#                         when every run passed unless AGENT_TESTS_KEEP=1)
#   AGENT_TESTS_DEBUG=1   also write the agents' debug logs (claude --debug-file, RUST_LOG for codex)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
agents_dir="$root/tests/agents"
latest="${AGENTS_LATEST:-0}"
for arg in "$@"; do [ "$arg" = --latest ] && latest=1; done
modules_dir="$agents_dir"
[ "$latest" = 1 ] && modules_dir="$agents_dir/latest"
claude_bin="$modules_dir/node_modules/.bin/claude"
codex_bin="$modules_dir/node_modules/.bin/codex"
gemini_bin="$modules_dir/node_modules/.bin/gemini"

timeout_secs="${AGENT_TIMEOUT:-120}"
max_retries="${AGENT_MAX_RETRIES:-1}"
prompt="${AGENT_PROMPT:-Reply with the word ready}"
upstream_key="sk-fake-upstream-agent-tests-0123456789"
upstream_key_env="TOLLGATE_AGENT_TESTS_UPSTREAM_KEY"

plain_claude=(claude:messages claude:chat claude:responses claude:gemini)
plain_codex=(codex:responses codex:chat codex:messages codex:gemini)
plain_gemini=(gemini:gemini gemini:chat gemini:responses gemini:messages)
tool_claude=(claude:messages:tool claude:chat:tool claude:responses:tool claude:gemini:tool)
tool_codex=(codex:responses:tool codex:chat:tool codex:messages:tool codex:gemini:tool)
tool_gemini=(gemini:gemini:tool gemini:chat:tool gemini:responses:tool gemini:messages:tool)
ns_codex=(codex:responses:ns codex:chat:ns codex:messages:ns codex:gemini:ns)
default_runs=("${plain_claude[@]}" "${plain_codex[@]}" "${plain_gemini[@]}")
default_runs+=("${tool_claude[@]}" "${tool_codex[@]}" "${tool_gemini[@]}" "${ns_codex[@]}")

# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
say() { echo "agent-tests: $*" >&2; }
die() {
    say "error: $*"
    exit 2
}

# ------------------------------------------------------------------------------------------ arguments

runs=()
for arg in "$@"; do
    case "$arg" in
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    --latest) ;;
    --list)
        printf '%s\n' "${default_runs[@]}" claude:mock codex:mock gemini:mock claude:direct codex:direct \
            gemini:direct claude:direct:tool codex:direct:tool gemini:direct:tool codex:direct:ns
        exit 0
        ;;
    all) runs+=("${default_runs[@]}") ;;
    plain) runs+=("${plain_claude[@]}" "${plain_codex[@]}" "${plain_gemini[@]}") ;;
    tool) runs+=("${tool_claude[@]}" "${tool_codex[@]}" "${tool_gemini[@]}") ;;
    ns | codex:ns) runs+=("${ns_codex[@]}") ;;
    claude) runs+=("${plain_claude[@]}") ;;
    codex) runs+=("${plain_codex[@]}") ;;
    gemini) runs+=("${plain_gemini[@]}") ;;
    claude:tool) runs+=("${tool_claude[@]}") ;;
    codex:tool) runs+=("${tool_codex[@]}") ;;
    gemini:tool) runs+=("${tool_gemini[@]}") ;;
    claude:messages | claude:chat | claude:responses | claude:gemini | claude:mock | claude:direct) runs+=("$arg") ;;
    codex:messages | codex:chat | codex:responses | codex:gemini | codex:mock | codex:direct) runs+=("$arg") ;;
    gemini:messages | gemini:chat | gemini:responses | gemini:gemini | gemini:mock | gemini:direct) runs+=("$arg") ;;
    claude:*:tool | codex:*:tool | gemini:*:tool)
        case "${arg#*:}" in
        messages:tool | chat:tool | responses:tool | gemini:tool | direct:tool) runs+=("$arg") ;;
        *) die "unknown run '$arg' (see --list and --help)" ;;
        esac
        ;;
    codex:messages:ns | codex:chat:ns | codex:responses:ns | codex:gemini:ns | codex:direct:ns) runs+=("$arg") ;;
    *) die "unknown run '$arg' (see --list and --help)" ;;
    esac
done
[ ${#runs[@]} -gt 0 ] || runs=("${default_runs[@]}")

case "$timeout_secs" in '' | *[!0-9]*) die "AGENT_TIMEOUT must be a number of seconds" ;; esac
case "$max_retries" in '' | *[!0-9]*) die "AGENT_MAX_RETRIES must be a number" ;; esac

command -v python3 >/dev/null || die "python3 is needed (fake upstream)"
command -v node >/dev/null || die "node is needed (the agents' npm wrappers)"

# ------------------------------------------------------------------------------------- install agents

if [ "$latest" = 1 ]; then
    command -v npm >/dev/null || die "npm is needed to install the newest agents"
    mkdir -p "$modules_dir"
    [ -f "$modules_dir/package.json" ] || echo '{"name": "tollgate-agent-tests-latest", "private": true}' >"$modules_dir/package.json"
    say "installing the newest published agents into $modules_dir"
    npm install --prefix "$modules_dir" --no-audit --no-fund --loglevel=error \
        @anthropic-ai/claude-code@latest @openai/codex@latest @google/gemini-cli@latest >&2
else
    force=0
    if [ ! -x "$claude_bin" ] || [ ! -x "$codex_bin" ] || [ ! -x "$gemini_bin" ]; then force=1; fi
    npm_ci_if_changed "$agents_dir" "the agents" "$force"
fi
# Claude Code's postinstall copies the native binary over a placeholder; npm versions that skip install
# scripts leave the placeholder, so run it by hand then.
if ! "$claude_bin" --version >/dev/null 2>&1; then
    say "claude does not start; running its postinstall"
    (cd "$modules_dir/node_modules/@anthropic-ai/claude-code" && node install.cjs) >&2 || true
fi
claude_version="$("$claude_bin" --version 2>/dev/null | head -1)" || die "claude does not start: $claude_bin"
codex_version="$("$codex_bin" --version 2>/dev/null | head -1)" || die "codex does not start: $codex_bin"
gemini_version="$("$gemini_bin" --version 2>/dev/null | head -1)" || die "gemini does not start: $gemini_bin"
gemini_version="Gemini CLI $gemini_version"

# ------------------------------------------------------------------------------------- build tollgate

if [ -z "${TOLLGATE_BIN:-}" ]; then
    say "building tollgate (cargo build)"
    (cd "$root" && cargo build --quiet)
    TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate"
fi
[ -x "$TOLLGATE_BIN" ] || die "no tollgate binary at $TOLLGATE_BIN"

# ----------------------------------------------------------------------------- fake upstream, tollgate

if [ -n "${AGENT_TESTS_OUT:-}" ]; then
    out="$AGENT_TESTS_OUT"
    mkdir -p "$out"
    out="$(cd "$out" && pwd)"
    keep_out=1
else
    out="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-agent-tests.XXXXXX")"
    keep_out="${AGENT_TESTS_KEEP:-0}"
fi
records="$out/upstream-requests.jsonl"
: >"$records"

fake_pid=""
gateway_pid=""
cleanup() {
    local pid
    for pid in "$gateway_pid" "$fake_pid"; do
        if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
    done
    for pid in "$gateway_pid" "$fake_pid"; do
        if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
    done
    gateway_pid=""
    fake_pid=""
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

python3 -u "$agents_dir/fake_upstream.py" "$records" >"$out/fake-upstream.out" 2>"$out/fake-upstream.err" &
fake_pid=$!
fake_addr="$(wait_for "$out/fake-upstream.out" 's|.*listening on http://\([^ ]*\).*|\1|p' "$fake_pid")" ||
    die "the fake upstream did not start: $(cat "$out/fake-upstream.err")"

cat >"$out/tollgate.toml" <<EOF
# Written by scripts/agent-tests.sh: one model per upstream kind, all on the fake upstream, plus the mock.
listen = "127.0.0.1:0"
data_dir = "$out/tollgate-data"
shutdown_grace_secs = 2

[[upstreams]]
name = "mock"
kind = "mock"

[[upstreams]]
name = "fake-chat"
kind = "openai-chat"
base_url = "http://$fake_addr/v1"
api_key_env = "$upstream_key_env"

[[upstreams]]
name = "fake-responses"
kind = "openai-responses"
base_url = "http://$fake_addr/v1"
api_key_env = "$upstream_key_env"

[[upstreams]]
name = "fake-messages"
kind = "anthropic"
base_url = "http://$fake_addr"
api_key_env = "$upstream_key_env"

[[upstreams]]
name = "fake-gemini"
kind = "gemini"
base_url = "http://$fake_addr"
api_key_env = "$upstream_key_env"

[[models]]
name = "mock"
upstream = "mock"

[[models]]
name = "agent-chat"
upstream = "fake-chat"
upstream_model = "fake-chat-model"

[[models]]
name = "agent-responses"
upstream = "fake-responses"
upstream_model = "fake-responses-model"
# Codex CLI sends the hosted "web_search" tool on every request: this model, like a default one, does not
# allow it, so tollgate leaves it out (x-tollgate-dropped-tools) and check_upstream.py sees it never arrive.

[[models]]
name = "agent-messages"
upstream = "fake-messages"
upstream_model = "fake-messages-model"

[[models]]
name = "agent-gemini"
upstream = "fake-gemini"
upstream_model = "fake-gemini-model"

[[groups]]
name = "default"
models = ["*"]
EOF

# `serve --config` mints no key: make the agents' key first (group "default", the config's first group).
client_key="$(add_key "$out/tollgate.toml" default default "$upstream_key_env=$upstream_key")" ||
    die "tollgate keys add failed"
env -u TOLLGATE_LISTEN "$upstream_key_env=$upstream_key" \
    "$TOLLGATE_BIN" serve --config "$out/tollgate.toml" >"$out/tollgate.out" 2>"$out/tollgate.log" &
gateway_pid=$!
gateway_addr="$(wait_for "$out/tollgate.log" 's|.*listening on http://\([0-9.:]*\).*|\1|p' "$gateway_pid")" ||
    die "tollgate did not start: $(tail -5 "$out/tollgate.log")"

tollgate_version="$(sed -n 's|.*\(tollgate [0-9][^ ]*\) listening on.*|\1|p' "$out/tollgate.log" | head -1)"
say "$claude_version; $codex_version; $gemini_version; ${tollgate_version:-tollgate} on $gateway_addr;" \
    "fake upstream on $fake_addr; files in $out"

# ------------------------------------------------------------------------------------------ the runs

# The variables every agent gets besides its own (env -i drops the caller's: no real API keys, proxies or
# configs leak in). HOME is the run's own.
base_env=("PATH=$PATH" "LANG=C.UTF-8" "TERM=dumb")
base_env+=("NO_PROXY=127.0.0.1,localhost" "no_proxy=127.0.0.1,localhost")

# run_claude RUNDIR BASE_URL KEY MODEL PROMPT
run_claude() {
    local dir="$1" base="$2" key="$3" model="$4" prompt="$5" debug=()
    mkdir -p "$dir/home/.claude" "$dir/work"
    [ "${AGENT_TESTS_DEBUG:-0}" = 1 ] && debug=(--debug-file "$dir/claude-debug.log")
    (cd "$dir/work" && env -i "${base_env[@]}" HOME="$dir/home" \
        CLAUDE_CONFIG_DIR="$dir/home/.claude" \
        ANTHROPIC_BASE_URL="$base" \
        ANTHROPIC_API_KEY="$key" \
        ANTHROPIC_MODEL="$model" \
        ANTHROPIC_DEFAULT_OPUS_MODEL="$model" \
        ANTHROPIC_DEFAULT_SONNET_MODEL="$model" \
        ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" \
        ANTHROPIC_SMALL_FAST_MODEL="$model" \
        CLAUDE_CODE_SUBAGENT_MODEL="$model" \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        DISABLE_TELEMETRY=1 \
        DISABLE_ERROR_REPORTING=1 \
        DISABLE_AUTOUPDATER=1 \
        CLAUDE_CODE_MAX_RETRIES="$max_retries" \
        timeout -k 5 "$timeout_secs" "$claude_bin" -p "$prompt" --model "$model" "${debug[@]}" \
        </dev/null >"$dir/stdout" 2>"$dir/stderr")
}

# run_codex RUNDIR BASE_URL(with /v1) KEY MODEL PROMPT
run_codex() {
    local dir="$1" base="$2" key="$3" model="$4" prompt="$5" debug=()
    mkdir -p "$dir/home" "$dir/codex-home" "$dir/work"
    [ "${AGENT_TESTS_DEBUG:-0}" = 1 ] && debug=("RUST_LOG=codex_core=debug,codex_api=debug")
    cat >"$dir/codex-home/config.toml" <<EOF
model = "$model"
model_provider = "tollgate"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.tollgate]
name = "tollgate"
base_url = "$base"
wire_api = "responses"
env_key = "TOLLGATE_AGENT_KEY"
request_max_retries = $max_retries
stream_max_retries = $max_retries
EOF
    (cd "$dir/work" && env -i "${base_env[@]}" HOME="$dir/home" "${debug[@]}" \
        CODEX_HOME="$dir/codex-home" \
        TOLLGATE_AGENT_KEY="$key" \
        timeout -k 5 "$timeout_secs" "$codex_bin" exec --strict-config --skip-git-repo-check --color never \
        "$prompt" \
        </dev/null >"$dir/stdout" 2>"$dir/stderr")
}

# run_gemini RUNDIR BASE_URL (no version) KEY MODEL PROMPT: headless `gemini -p` with an API key
# (`security.auth.selectedType = "gemini-api-key"`), the base URL in GOOGLE_GEMINI_BASE_URL, the workspace
# trusted, no telemetry or update checks.
run_gemini() {
    local dir="$1" base="$2" key="$3" model="$4" prompt="$5" debug=()
    mkdir -p "$dir/home/.gemini" "$dir/work"
    [ "${AGENT_TESTS_DEBUG:-0}" = 1 ] && debug=(--debug)
    cat >"$dir/home/.gemini/settings.json" <<SETTINGS
{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true}
}
SETTINGS
    (cd "$dir/work" && env -i "${base_env[@]}" HOME="$dir/home" \
        GEMINI_API_KEY="$key" \
        GOOGLE_GEMINI_BASE_URL="$base" \
        GEMINI_CLI_TRUST_WORKSPACE=true \
        timeout -k 5 "$timeout_secs" "$gemini_bin" -p "$prompt" -m "$model" "${debug[@]}" \
        </dev/null >"$dir/stdout" 2>"$dir/stderr")
}

results=()
passed=0
failed=0

for run in "${runs[@]}"; do
    IFS=: read -r agent kind tool <<<"$run"
    dir="$out/runs/${run//:/-}"
    rm -rf "$dir"
    mkdir -p "$dir/work"

    case "$kind" in
    mock)
        model=mock
        expect="This is tollgate's built-in mock model"
        ;;
    direct)
        case "$agent" in
        claude) proto=messages ;;
        gemini) proto=gemini ;;
        *) proto=responses ;;
        esac
        model="agent-$proto"
        expect="AGENT-OK from $proto upstream"
        ;;
    *)
        model="agent-$kind"
        expect="AGENT-OK from $kind upstream"
        ;;
    esac
    run_prompt="$prompt"
    min_requests=1
    if [ "$tool" = ns ]; then
        run_prompt="Call the tool the upstream names. TOOL-NAMESPACE"
        expect="$expect; the namespaced tool was routed"
        min_requests=2
    elif [ "$tool" = tool ]; then
        marker="MARKER-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
        echo "$marker" >"$dir/work/marker.txt"
        run_prompt="Read the file the upstream names. TOOL-ROUNDTRIP $dir/work/marker.txt"
        expect="$expect; the tool said $marker"
        min_requests=2
    fi
    if [ "$kind" = direct ]; then
        host="$fake_addr"
        key="sk-direct-agent-tests"
    else
        host="$gateway_addr"
        key="$client_key"
    fi

    rec_from="$(wc -l <"$records")"
    log_from="$(wc -l <"$out/tollgate.log")"
    say "running $run (model $model via http://$host) ..."
    start_us="${EPOCHREALTIME/./}"
    status=0
    case "$agent" in
    claude) run_claude "$dir" "http://$host" "$key" "$model" "$run_prompt" || status=$? ;;
    gemini) run_gemini "$dir" "http://$host" "$key" "$model" "$run_prompt" || status=$? ;;
    *) run_codex "$dir" "http://$host/v1" "$key" "$model" "$run_prompt" || status=$? ;;
    esac
    elapsed_ms=$(((${EPOCHREALTIME/./} - start_us) / 1000))
    elapsed="$((elapsed_ms / 1000)).$(printf '%01d' $(((elapsed_ms % 1000) / 100)))s"

    sleep 0.2 # let tollgate write its request log line
    tail -n +"$((log_from + 1))" "$out/tollgate.log" >"$dir/tollgate.log" || true
    check_status=0
    python3 "$agents_dir/check_upstream.py" "$records" "$rec_from" "$kind" --min-requests "$min_requests" \
        --upstream-model "fake-$kind-model" --upstream-key "$upstream_key" --client-key "$client_key" \
        >"$dir/upstream-check.txt" 2>&1 || check_status=$?
    tail -n +"$((rec_from + 1))" "$records" >"$dir/upstream-requests.jsonl" || true

    detail=""
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        detail="timed out after ${timeout_secs}s"
    elif [ "$status" -ne 0 ]; then
        detail="exit $status"
    elif ! grep -qF "$expect" "$dir/stdout"; then
        detail="exit 0 but stdout lacks \"$expect\""
    elif [ "$check_status" -ne 0 ]; then
        detail="$(grep -m1 '^PROBLEM: ' "$dir/upstream-check.txt" | sed 's/^PROBLEM: //')"
        [ -n "$detail" ] || detail="upstream check failed"
    fi

    if [ -z "$detail" ]; then
        result=PASS
        passed=$((passed + 1))
        detail="$(grep -c '^upstream got: [A-Z]' "$dir/upstream-check.txt" || true) upstream request(s)"
        say "$run: PASS in $elapsed"
    else
        result=FAIL
        failed=$((failed + 1))
        # The most telling line: tollgate's error for this run, else the agent's last words.
        why="$(sed -n 's/.* status=\([0-9]*\) .* error=\(.*\)/tollgate status=\1: \2/p' "$dir/tollgate.log" |
            tail -1 | cut -c1-150)"
        if [ -z "$why" ]; then
            why="$(cat "$dir/stdout" "$dir/stderr" | grep -v '^\s*$' | grep -iv 'warning' | tail -1 || true)"
            why="${why:0:160}"
        fi
        [ -n "$why" ] && detail="$detail; $why"
        say "$run: FAIL in $elapsed: $detail"
        {
            echo "---- $run: agent stdout (last 10 lines)"
            tail -n 10 "$dir/stdout"
            echo "---- $run: agent stderr (last 15 lines)"
            tail -n 15 "$dir/stderr"
            echo "---- $run: tollgate log during the run"
            cat "$dir/tollgate.log"
            echo "---- $run: fake upstream"
            cat "$dir/upstream-check.txt"
            echo "----"
        } >&2
    fi
    results+=("$run|$model|$result|$elapsed|${detail//|//}")
done

# -------------------------------------------------------------------------------------------- summary

{
    echo
    echo "Agent tests against tollgate ($claude_version; $codex_version; $gemini_version)"
    printf '  %-22s %-16s %-6s %7s  %s\n' RUN MODEL RESULT TIME DETAIL
    for r in "${results[@]}"; do
        IFS='|' read -r run model result elapsed detail <<<"$r"
        printf '  %-22s %-16s %-6s %7s  %s\n' "$run" "$model" "$result" "$elapsed" "$detail"
    done
    echo
} >&2

cleanup
if [ "$failed" -ne 0 ] || [ "$keep_out" = 1 ]; then
    say "configs, logs and recorded upstream requests are in $out"
else
    rm -rf "$out"
fi
echo "agent-tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
