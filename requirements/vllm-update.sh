#!/usr/bin/env bash
# Rebuild lockfiles/vllm.lock and requirements/vllm.txt from requirements/vllm.in (network).
#   1. pip resolves vllm.in's closure in a scratch venv (`install --dry-run --ignore-installed
#      --report`: the wheel pip would install for each package on this Python, with its sha256),
#   2. the packages vllm.in excludes are dropped,
#   3. `dflash-guard lock --package NAME==VERSION@sha256:HEX ...` pins the rest (with the built-in
#      pair as target and drafter, as every lockfile has them) into lockfiles/vllm.lock,
#   4. `dflash-guard export requirements` writes requirements/vllm.txt from that lock.
# PYTHON (default python3) must be the CPython 3.11 that scripts/install-vllm.sh uses.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --dry-run --ignore-installed \
  --report "$work/report.json" -r requirements/vllm.in
mapfile -t packages < <("$python" - "$work/report.json" requirements/vllm.in <<'PY'
import json
import sys

from packaging.utils import canonicalize_name

report, spec = sys.argv[1], sys.argv[2]
excluded = set()
for line in open(spec, encoding="utf-8"):
    if line.startswith("# exclude:"):
        excluded |= {canonicalize_name(n) for n in line.split(":", 1)[1].split()}
for item in json.load(open(report, encoding="utf-8"))["install"]:
    meta, archive = item["metadata"], item["download_info"].get("archive_info", {})
    sha256 = archive.get("hashes", {}).get("sha256")
    if not sha256:
        sys.exit(f"pip's report gives no sha256 for {meta['name']} {meta['version']}")
    if canonicalize_name(meta["name"]) not in excluded:
        print(f"--package={meta['name']}=={meta['version']}@sha256:{sha256}")
PY
)
"$python" -m dflash_guard fixtures make "$work/pair"
"$python" -m dflash_guard lock --target "$work/pair/target" --drafter "$work/pair/drafter" \
  "${packages[@]}" -o lockfiles/vllm.lock
"$python" -m dflash_guard export requirements --lock lockfiles/vllm.lock -o requirements/vllm.txt
echo "pinned ${#packages[@]} packages into lockfiles/vllm.lock and requirements/vllm.txt" >&2
