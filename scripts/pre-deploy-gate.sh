#!/usr/bin/env bash
# The script a deploy pipeline calls before rolling out a DFlash target/drafter pair.
# Its exit status is the decision: 0 approved (deploy), 1 refused, 2 usage or input error.
#
#   scripts/pre-deploy-gate.sh [--lock dflash.lock] [--policy strict] \
#       [--root target=DIR --root drafter=DIR] [-o approval.json] [--sign | --key KEY] ...
#
# Every argument is passed to `dflash-guard gate`; the defaults below apply when not given.
# Environment: DFLASH_GUARD (the command, default `dflash-guard`), DFLASH_LOCK, DFLASH_POLICY,
# DFLASH_APPROVAL.
# `strict`, `default` and `dev` always mean the built-in policies, even when a file of that name
# is in the working folder; give a policy file as a path (`./my-policy.yaml`). The approval record
# names the policy (`builtin:strict` or the file) and carries its sha256.
set -uo pipefail

read -r -a guard <<< "${DFLASH_GUARD:-dflash-guard}"
args=("$@")
has() { local flag=$1; for a in "${args[@]}"; do [[ $a == "$flag" || $a == "$flag="* ]] && return 0; done; return 1; }
has --lock || args+=(--lock "${DFLASH_LOCK:-dflash.lock}")
has --policy || args+=(--policy "${DFLASH_POLICY:-strict}")
has -o || has --output || args+=(--output "${DFLASH_APPROVAL:-approval.json}")

"${guard[@]}" gate "${args[@]}"
status=$?
case $status in
  0) echo "pre-deploy gate: APPROVED" >&2 ;;
  1) echo "pre-deploy gate: REFUSED: do not deploy" >&2 ;;
  *) echo "pre-deploy gate: ERROR (exit $status): the gate could not decide; do not deploy" >&2
     status=2 ;;
esac
exit "$status"
