#!/usr/bin/env bash
# gpu-check.sh: kernels_ref on a CUDA machine, in one go (meant to take a few minutes on an H200).
#   1. `dflash-guard difftest local` on the built-in fixture pair on cuda: float32 must be identical,
#      eager and with CUDA graphs; bfloat16 (eager and graphs) may diverge only at near-ties.
#   2-4. benchmarks/bench_cuda.py: decode/verify/draft step times (eager and graph) against the
#      measured-bandwidth roofline, end-to-end tokens/s (autoregressive, oracle and fixture
#      drafter), one table, JSON in benchmarks/results/<gpu-name>.json.
#   5. the gpu-marked tests (tests/kernels_ref): graph replay token-exact with eager decoding.
# Extra arguments go to bench_cuda.py (e.g. --shapes qwen3-8b --iters 50).
# Exit 0: every check passed; 1: a check failed; 2: no CUDA device, or set-up failed.
# PYTHON (default python3) must have torch with CUDA; when the package's other dependencies are
# not importable, they are installed into .venv (created on top of that python's packages).
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
then
  echo "gpu-check: no CUDA device: torch.cuda.is_available() is False for $python" \
    "(or torch is missing); nothing was checked." >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$python" -c "import dflash_guard._cli, pytest" 2>/dev/null; then
  [ -x .venv/bin/python ] || "$python" -m venv --system-site-packages .venv || exit 2
  python=.venv/bin/python
  "$python" -m pip install -q -e '.[test]' || { echo "gpu-check: pip install -e . failed" >&2; exit 2; }
  if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu-check: the torch in .venv has no CUDA: remove .venv (it is recreated on the" \
      "system torch) or set PYTHON to a python with CUDA torch and the package installed" >&2
    exit 2
  fi
fi
"$python" -c "import torch; print('gpu-check:', torch.cuda.get_device_name(0), 'torch',
torch.__version__, 'cuda', torch.version.cuda)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m dflash_guard fixtures make "$work/pair" >/dev/null || exit 2

# name, dtype, extra flags: each run's JSON report goes to $work/<name>.json.
runs=("fp32-eager float32" "fp32-graphs float32 --cuda-graphs" "bf16-eager bfloat16"
  "bf16-graphs bfloat16 --cuda-graphs")
for run in "${runs[@]}"; do
  read -r name dtype flags <<<"$run"
  # shellcheck disable=SC2086  # $flags is empty or one flag
  "$python" -m dflash_guard difftest local --target "$work/pair/target" --drafter "$work/pair/drafter" \
    --device cuda --dtype "$dtype" $flags --format json >"$work/$name.json" 2>"$work/$name.err"
  echo "$?" >"$work/$name.rc"
done

# One verdict per run: float32 exit 0 (identical); bfloat16 exit 0, or 1 with near-ties only.
"$python" - "$work" "${runs[@]}" <<'EOF'
import json, sys
from pathlib import Path

work, failed = Path(sys.argv[1]), False
print(f"{'difftest':<12} {'exit':<5} {'diverged':<9} {'near-ties':<10} {'hard':<5} verdict")
for run in sys.argv[2:]:
    name = run.split()[0]
    rc = int((work / f"{name}.rc").read_text())
    try:
        report = json.loads((work / f"{name}.json").read_text())
    except ValueError:
        print(f"{name:<12} {rc:<5} report unreadable: {(work / f'{name}.err').read_text()[-300:]}")
        failed = True
        continue
    diverged = [p for p in report["prompts"] if not p["identical"]]
    near = [p for p in diverged if p["near_tie"]]
    ok = rc == 0 if name.startswith("fp32") else rc in (0, 1) and len(near) == len(diverged)
    failed |= not ok
    verdict = "pass" if ok else "FAIL"
    print(f"{name:<12} {rc:<5} {len(diverged):<9} {len(near):<10} {len(diverged) - len(near):<5}"
          f" {verdict}")
sys.exit(1 if failed else 0)
EOF
difftest_rc=$?

"$python" benchmarks/bench_cuda.py "$@"
bench_rc=$?

"$python" -m pytest -q -p no:cacheprovider -m gpu tests/kernels_ref
tests_rc=$?

if [ "$difftest_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ] || [ "$tests_rc" -ne 0 ]; then
  echo "gpu-check: FAILED (difftest exit $difftest_rc, bench exit $bench_rc," \
    "gpu tests exit $tests_rc)" >&2
  exit 1
fi
echo "gpu-check: all checks passed"
