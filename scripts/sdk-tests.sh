#!/usr/bin/env bash
# Runs the SDK compatibility suite (tests/sdk/) against the tollgate binary: the official Python SDKs
# (openai, anthropic, google-genai, langchain-openai) and the Node SDKs (Google's @google/genai and OpenAI's
# openai, driven from the same pytest run by tests/sdk/test_gemini_node_sdk.py and test_node_endpoints_sdk.py).
#
# Creates .venv in the repo root when missing, installs tests/sdk/requirements.txt into it (skipped while
# the requirements are unchanged since the last install), installs tests/sdk/node/node_modules with `npm ci`
# (skipped while its package-lock.json is unchanged; needs node and npm), builds the binary unless
# TOLLGATE_BIN names one, then runs pytest. Extra arguments go to pytest (e.g. `-k anthropic`, `-x`).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
say() { echo "sdk-tests: $*" >&2; }
die() {
    say "error: $*"
    exit 2
}

venv="$root/.venv"
requirements="tests/sdk/requirements.txt"
stamp="$venv/.sdk-requirements.sha256"

if [ ! -x "$venv/bin/python" ]; then
    echo "sdk-tests: creating $venv" >&2
    python3 -m venv "$venv"
fi

want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "sdk-tests: installing $requirements" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    echo "$want" >"$stamp"
fi

command -v node >/dev/null || die "node is needed (Google's Node SDK, tests/sdk/node)"
npm_ci_if_changed "$root/tests/sdk/node" "the Node SDKs (@google/genai, openai)"

if [ -z "${TOLLGATE_BIN:-}" ]; then
    cargo build --quiet
    TOLLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/tollgate"
fi
export TOLLGATE_BIN

# No cache provider: nothing is written into the work tree besides the (ignored) __pycache__.
exec "$venv/bin/python" -m pytest tests/sdk -q -p no:cacheprovider "$@"
