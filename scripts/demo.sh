#!/usr/bin/env bash
# `make demo`: the whole gate on the built-in tiny target/drafter pair.
set -euo pipefail
echo "demo: not wired yet" >&2
exit 1
