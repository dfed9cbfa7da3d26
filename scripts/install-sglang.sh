#!/usr/bin/env bash
# Install the SGLang that `launch --check sglang` resolves commands with, beside the pinned vLLM
# venv, and print its python.
#
#   scripts/install-sglang.sh install   prints the path of the venv's python
#   scripts/install-sglang.sh path      prints that path without installing (exit 1 if not ready)
#
# requirements/sglang.txt pins sglang 0.5.23 and the three small packages its argument modules
# import beyond the vLLM venv's (orjson, ipython, traitlets), each by its sha256; they go in with
# `pip install --no-deps --require-hashes` into a venv of their own whose .pth file adds the
# pinned vLLM venv's site-packages (scripts/install-vllm.sh: torch 2.13.0+cpu, transformers 5.19).
# SGLang's own CUDA pins (sglang-kernel, flashinfer, torch 2.14.1) are never installed: serving
# SGLang needs a GPU; parsing its command line does not. About a minute and 256 MB once vLLM's venv
# is there. Everything is cached under
#   ${DFLASH_GUARD_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/dflash-guard}/sglang/<digest>/
# (the digest of requirements/sglang.txt and of the vLLM venv it extends) as requirements.txt,
# venv/, install.log, install.pid and install.rc, reused, waited for and failed exactly like
# scripts/install-vllm.sh's cache (delete the folder to retry a failed install).
#
# Environment: PYTHON, DFLASH_GUARD, VLLM_LOCK (passed to install-vllm.sh), SGLANG_REQUIREMENTS
# (default requirements/sglang.txt), SGLANG_WAIT_S (default 1800).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQS="${SGLANG_REQUIREMENTS:-$ROOT/requirements/sglang.txt}"
WAIT_S="${SGLANG_WAIT_S:-1800}"

die() { echo "install-sglang: $*" >&2; exit 1; }

mode="${1:-}"
case "$mode" in
    install | path) ;;
    *) sed -n '2,7p' "$0" >&2; exit 2 ;;
esac
[ -f "$REQS" ] || die "no $REQS"
VLLM_PYTHON="$(bash "$ROOT/scripts/install-vllm.sh" "$mode" | tail -n 1)" ||
    die "the pinned vLLM venv is not ready (scripts/install-vllm.sh $mode failed)"
VLLM_SITE="$("$VLLM_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ||
    die "cannot read the site-packages of $VLLM_PYTHON"
DIGEST="$({ cat "$REQS"; echo "$VLLM_SITE"; } | sha256sum | cut -c1-64)"
CACHE_ROOT="${DFLASH_GUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dflash-guard}"
CACHE="$CACHE_ROOT/sglang/$DIGEST"
VENV_PYTHON="$CACHE/venv/bin/python"

TOOL=install-sglang
# shellcheck source=scripts/cache-install.sh
. "$ROOT/scripts/cache-install.sh"

install() {
    claim_cache || return 0
    cp "$REQS" "$CACHE/requirements.txt"
    echo "install-sglang: installing the pinned SGLang into $CACHE/venv (about a minute, 256 MB)" >&2
    local rc=0 start=$SECONDS
    {
        echo "# install started $(date -u +%FT%TZ)"
        "$VLLM_PYTHON" -m venv "$CACHE/venv" &&
            site="$("$VENV_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" &&
            echo "$VLLM_SITE" >"$site/dflash-guard-vllm.pth" &&
            "$VENV_PYTHON" -m pip install --no-deps --require-hashes --no-input \
                -r "$CACHE/requirements.txt" &&
            # what launch --check sglang imports, in the isolated mode it runs it in
            "$VENV_PYTHON" -I -c 'import sglang.cli.serve, sglang.srt.server_args'
    } >"$CACHE/install.log" 2>&1 || rc=$?
    echo "# install ended $(date -u +%FT%TZ) after $((SECONDS - start)) s, exit $rc" >>"$CACHE/install.log"
    echo "$rc" >"$CACHE/install.rc"
    rm -f "$CACHE/install.pid"
    [ "$rc" = 0 ] || { tail -n 20 "$CACHE/install.log" >&2; die "the install failed (see $CACHE/install.log)"; }
}

if [ "$mode" = install ]; then
    install
else
    ready || die "no finished install in $CACHE (run: $0 install)"
fi
echo "$VENV_PYTHON"
