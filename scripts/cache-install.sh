# The protocol of a cached install folder, shared by install-vllm.sh and install-sglang.sh (source
# it; it needs TOOL, CACHE, VENV_PYTHON, WAIT_S and die). A finished install (install.rc 0) is
# reused; one in progress (a live install.pid, no install.rc) is waited for, never started twice;
# a failed one is a failure (delete the folder to retry); a folder nobody is installing into is
# stale and removed.

ready() { [ -f "$CACHE/install.rc" ] && [ "$(cat "$CACHE/install.rc")" = 0 ] && [ -x "$VENV_PYTHON" ]; }

wait_for_install() {
    local waited=0
    while [ ! -f "$CACHE/install.rc" ]; do
        if [ -f "$CACHE/install.pid" ]; then
            kill -0 "$(cat "$CACHE/install.pid")" 2>/dev/null || return 1  # the installer died
        elif [ "$waited" -ge 10 ]; then
            return 1  # nobody claimed the folder it made
        fi
        [ "$waited" -lt "$WAIT_S" ] || die "waited ${WAIT_S}s for the install in $CACHE"
        [ "$waited" -eq 0 ] && echo "$TOOL: waiting for the install in progress in $CACHE" >&2
        sleep 5
        waited=$((waited + 5))
    done
}

# Succeeds when this process now owns $CACHE and must install into it; fails (returns 1) when a
# finished install is there to reuse; dies on a failed one.
claim_cache() {
    mkdir -p "$(dirname "$CACHE")"
    # whoever creates the folder installs; the others wait for install.rc
    if ! mkdir "$CACHE" 2>/dev/null; then
        if wait_for_install; then
            ready && return 1
            tail -n 20 "$CACHE/install.log" >&2 || true
            die "the cached install in $CACHE failed (install.rc $(cat "$CACHE/install.rc")); delete it to retry"
        fi
        echo "$TOOL: removing the stale install in $CACHE" >&2
        rm -rf "$CACHE"
        mkdir "$CACHE" || die "another install claimed $CACHE; run again to wait for it"
    fi
    echo $$ >"$CACHE/install.pid"
}
