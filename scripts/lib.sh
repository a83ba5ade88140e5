# shellcheck shell=bash
# Helpers shared by the test scripts; sourced, not run. They use the caller's `say` and `die`.

# npm_ci_if_changed DIR WHAT [FORCE]: `npm ci --prefix DIR` unless DIR/node_modules was installed from the
# same package-lock.json (a stamp in node_modules keeps its hash), or always when FORCE is 1.
npm_ci_if_changed() {
    local dir="$1" what="$2" force="${3:-0}" stamp want t0
    stamp="$dir/node_modules/.installed-lock.sha256"
    want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
    if [ "$force" = 1 ] || [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
        command -v npm >/dev/null || die "npm is needed to install $what"
        say "installing $what: npm ci --prefix $dir"
        t0=$SECONDS
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
        echo "$want" >"$stamp"
        say "installed in $((SECONDS - t0)) s ($(du -sh "$dir/node_modules" | cut -f1))"
    fi
}

# wait_for FILE SED-EXPRESSION PID: prints the first match of the sed expression in FILE, waiting up to 30 s
# while process PID lives.
wait_for() {
    local file="$1" expr="$2" pid="$3" found="" i
    for ((i = 0; i < 300; i++)); do
        found="$(sed -n "$expr" "$file" 2>/dev/null | head -1)"
        [ -n "$found" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$found" ] || return 1
    echo "$found"
}

# add_key CONFIG NAME GROUP [VAR=VALUE...]: `$TOLLGATE_BIN keys add` with the given extra environment (the
# config's api_key_env variables must be set for it to load); prints the key, the last line of its output.
# `tollgate serve --config` mints no key: a test makes its first key this way before starting the server.
add_key() {
    local config="$1" name="$2" group="$3" output key
    shift 3
    output="$(env "$@" "$TOLLGATE_BIN" keys add --config "$config" --name "$name" --group "$group")" || return 1
    key="$(printf '%s\n' "$output" | tail -n 1)"
    case "$key" in
    tg_*) echo "$key" ;;
    *)
        echo "tollgate keys add printed no key: $output" >&2
        return 1
        ;;
    esac
}
