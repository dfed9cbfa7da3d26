"""`difftest isolation` against llama.cpp's DFlash `llama-server` with four parallel slots and
prompt caching on (`--cache-prompt`, `--cache-reuse`, one unified KV buffer shared by the slots):
each prompt's output among concurrent, prefix-sharing tenants equals its solo run.

The built-in pair (its drafter reads layers [1, 2]), converted to f32 GGUF as in
`test_llamacpp.py`. The engine build is part of the suite: a failed build fails (never skips).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.llamacpp import build_server, convert, llama_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

PROMPTS = [  # token ids (bytes), long enough that a tenant shares a 30-odd token prefix
    b"def binary_search(items, target):\n    lo, hi = 0, len(items)\n",
    b"class Stack:\n    def __init__(self):\n        self.items = []\n",
    b"total = 0\nfor i in range(10):\n    total = total + i * i\n",
    b"red green blue red green blue red green blue red green ",
    b"def mean(data):\n    n = len(data)\n    return sum(data) / n\n",
]
CACHED = ("--cache-prompt", "--cache-reuse", "8", "--kv-unified")


@pytest.fixture(scope="module")
def gguf_pair(builtin_pair, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("isolation")
    target, drafter = builtin_pair.target, builtin_pair.drafter
    return (convert(target, folder / "target.gguf"),
            convert(drafter, folder / "drafter.gguf", target_dir=target))


def test_llamacpp_parallel_slots_with_prompt_cache_are_isolated(cli, gguf_pair, tmp_path):
    target_gguf, drafter_gguf = gguf_pair
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": list(p)}) + "\n"
                               for i, p in enumerate(PROMPTS)))
    with llama_server(build_server(), target_gguf, drafter_gguf, slots=4,
                      extra=CACHED) as candidate:
        result = cli("difftest", "isolation", "--candidate", candidate.url, "--prompts",
                     prompts, "--max-new-tokens", "24", "--concurrency", "4", "--format", "json")
        log = candidate.log.read_text()
    # the prompt cache was used: the slots evaluated fewer prompt tokens than were sent (each
    # prompt goes alone and among tenants, each tenant twice; a tenant is as long as its prompt)
    evaluated = sum(int(n) for n in re.findall(r"prompt eval time = .* / +(\d+) tokens", log))
    sent = 4 * sum(len(p) for p in PROMPTS)
    assert 0 < evaluated < sent, (evaluated, sent)
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["identical"] and report["prompts"] == len(PROMPTS)
    assert report["tenants"] == len(PROMPTS)
    assert {r["compared_by"] for r in report["results"]} == {"token_ids"}
