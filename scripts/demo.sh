#!/usr/bin/env bash
# `make demo`: the whole deploy gate on the built-in tiny target/drafter pair.
#   1. write the fixture pair into demo-out/, 2. lock it (with an engine pinned to a release),
#   3. gate it under dev (extended with the engine's release pin) and show the approval record,
#   4. tamper with one byte of the drafter and show the same gate refusing it.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v dflash-guard >/dev/null 2>&1; then
  guard=(dflash-guard)
else
  guard=("${PYTHON:-python3}" -m dflash_guard)
fi
python=${PYTHON:-python3}
command -v "$python" >/dev/null 2>&1 || python=python
out=demo-out
policy=$out/dev-demo.yaml
vllm_commit=a1b2c3d4e5f60718293a4b5c6d7e8f9012345678
vllm_release="vllm=https://github.com/vllm-project/vllm@$vllm_commit#v0.11.0"

step() { printf '\n== %s\n' "$*"; }

rm -rf "$out"
mkdir -p "$out"

step "1. the built-in tiny pair, and a policy: dev, with the engine's release pinned"
"${guard[@]}" fixtures make "$out"
# The lock's `#v0.11.0` label proves nothing: the policy's release map is what says the commit is
# vLLM's v0.11.0 (an illustrative commit here; pin real ones after `git ls-remote`).
cat >"$policy" <<YAML
extends: dev
name: dev-demo
engines:
  repositories:
    - upstream: https://github.com/vllm-project/vllm
      releases: {v0.11.0: $vllm_commit}
YAML

step "2. lock it: every file's sha256, the engine at a full commit"
"${guard[@]}" lock --target "$out/target" --drafter "$out/drafter" --engine "$vllm_release" \
  -o "$out/dflash.lock"

step "3. gate it under $policy"
"${guard[@]}" gate --lock "$out/dflash.lock" --policy "$policy" \
  --root target="$out/target" --root drafter="$out/drafter" -o "$out/approval.json"

step "the approval record ($out/approval.json): an in-toto statement"
"$python" - "$out/approval.json" <<'PY'
import json, sys
statement = json.load(open(sys.argv[1]))
predicate = statement["predicate"]
print("predicateType:", statement["predicateType"])
print("subjects:     ", len(statement["subject"]), "(the lockfile and every locked file)")
for subject in statement["subject"][:3]:
    print("   ", subject["name"], subject["digest"]["sha256"][:16] + "...")
print("policy:       ", predicate["policy"]["name"], predicate["policy"]["digest"]["sha256"][:16] + "...")
print("engines:      ", [e["uri"] for e in predicate["engines"]])
difftest = next(c["evidence"] for c in predicate["checks"] if c["name"] == "difftest")
print("difftest:     ", "identical" if difftest["identical"] else "DIVERGED",
      f"over {difftest['prompts']} prompts, tau {difftest['acceptance_length']}")
print("approved_at:  ", predicate["approved_at"])
PY

step "4. the same gate, after one byte of the drafter's weights changed"
cp -R "$out/drafter" "$out/drafter-tampered"
"$python" - "$out/drafter-tampered/model.safetensors" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[-1] ^= 0x01
open(path, "wb").write(bytes(data))
print(f"flipped the last byte of {path}")
PY
set +e
"${guard[@]}" gate --lock "$out/dflash.lock" --policy "$policy" \
  --root target="$out/target" --root drafter="$out/drafter-tampered" \
  -o "$out/approval-tampered.json"
status=$?
set -e
if [ "$status" -eq 1 ] && [ ! -e "$out/approval-tampered.json" ]; then
  printf '\ndemo: the tampered drafter was refused (exit 1) and no approval was written.\n'
  printf 'To run the README examples yourself, put dflash-guard on your PATH:\n'
  printf '    . .venv/bin/activate        (or call .venv/bin/dflash-guard)\n'
else
  printf '\ndemo: FAILED: expected a refusal (exit 1), got exit %s\n' "$status" >&2
  exit 1
fi
