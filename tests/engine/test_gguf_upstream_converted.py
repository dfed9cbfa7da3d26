"""The pinned `convert_hf_to_gguf.py` is the oracle for how a GGUF carries its upstream's
vocabulary (`scan.upstream.gguf_differences`): the built-in target converted as it is agrees
with its own tokenizer.json, token for token, type for type, with its end-of-generation id; a
conversion of the same target with two vocabulary entries swapped differs at exactly those
two ids."""

from __future__ import annotations

import json

import pytest

from dflash_guard.scan import upstream
from kernels_ref.gguf_reader import read_gguf
from tests.support.llamacpp import convert, swap_vocab_entries

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # two conversions


def _differences(gguf_path, upstream_folder) -> list[str]:
    tokenizer = json.loads((upstream_folder / "tokenizer.json").read_text())
    end = json.loads((upstream_folder / "generation_config.json").read_text())["eos_token_id"]
    with gguf_path.open("rb") as handle, read_gguf(handle) as gguf:
        return upstream.gguf_differences(gguf, tokenizer, {end})


def test_a_conversion_is_its_upstream_and_a_swapped_one_is_not(builtin_pair, tmp_path):
    plain = convert(builtin_pair.target, tmp_path / "plain" / "target.gguf")
    assert _differences(plain, builtin_pair.target) == []

    swapped = swap_vocab_entries(builtin_pair.target, tmp_path / "swapped-target", 65, 66)
    converted = convert(swapped, tmp_path / "swapped" / "target.gguf")
    assert _differences(converted, builtin_pair.target) == [
        "token 65 'B' (upstream 'A')", "token 66 'A' (upstream 'B')"]
