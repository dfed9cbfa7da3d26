#!/usr/bin/env bash
# `make requirements`: rebuild lockfiles/release.lock and requirements/release.txt from
# requirements/release.in (network: downloads the pinned wheels to hash them).
#   1. download each wheel named in release.in (no resolution: release.in is the whole closure),
#   2. lock the built-in pair plus those wheels into lockfiles/release.lock,
#   3. export requirements/release.txt (pip --require-hashes) from that lock.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
torch_index=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m pip download --no-deps --only-binary=:all: --retries 1 \
  --extra-index-url "$torch_index" -d "$work/wheels" -r requirements/release.in

packages=()
for wheel in "$work"/wheels/*.whl; do
  packages+=(--package "$wheel")
done
"$python" -m dflash_guard fixtures make "$work/pair"
"$python" -m dflash_guard lock --target "$work/pair/target" --drafter "$work/pair/drafter" \
  "${packages[@]}" -o lockfiles/release.lock
"$python" -m dflash_guard export requirements --lock lockfiles/release.lock \
  -o requirements/release.txt
