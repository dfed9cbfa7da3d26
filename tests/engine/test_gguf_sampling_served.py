"""The pinned llama-server applies a GGUF's `general.sampling.*` metadata to every request that
does not set the field itself (the oracle for DG-GENERATION-DEFAULTS' GGUF side,
tests/scan/test_gguf_sampling.py): a conversion of the built-in target whose generation config
sets `repetition_penalty` (the converter writes it as `general.sampling.penalty_repeat`) is a
finding, and answers a temperature-0 request otherwise than the plain conversion, which is quiet.

The engine build is part of the suite: when it fails, these tests fail (never skip).
"""

from __future__ import annotations

import json

import httpx2
import pytest

from dflash_guard import rules
from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.severity import Severity
from tests.support.llamacpp import build_server, convert, llama_server
from tests.support.trust import copy_folder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # two conversions, two servers

K = "general.sampling."


def _found(path):
    return [f for f in scan_gguf_file(path, path.name)
            if f.rule_id == rules.GENERATION_DEFAULTS.id]


@pytest.fixture(scope="module")
def conversions(builtin_pair, tmp_path_factory):
    """(plain, penalised): the built-in target converted by the pinned converter, as it is and
    with `repetition_penalty: 1.5` in its generation config."""
    folder = tmp_path_factory.mktemp("sampling")
    penalised = copy_folder(builtin_pair.target, folder / "penalised-target")
    config = json.loads((penalised / "generation_config.json").read_text())
    (penalised / "generation_config.json").write_text(
        json.dumps({**config, "repetition_penalty": 1.5}))
    return (convert(builtin_pair.target, folder / "plain" / "target.gguf"),
            convert(penalised, folder / "penalised" / "target.gguf"))


def test_a_real_conversion_is_quiet_and_its_penalty_is_a_finding(conversions):
    plain, penalised = conversions
    assert _found(plain) == []
    [finding] = _found(penalised)
    assert finding.severity is Severity.high
    assert f"{K}penalty_repeat 1.5:" in finding.message


def _complete(url: str, prompt: str, **fields: object) -> str:
    answer = httpx2.post(url + "/completion", json={"prompt": prompt, "n_predict": 48,
                                                    "temperature": 0, **fields}, timeout=120)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["content"])


def test_llama_server_applies_the_penalty_to_a_greedy_request(conversions):
    """The oracle: temperature 0 and no other field, the penalised GGUF answers otherwise; a
    request that sends its own `repeat_penalty` overrides the file's."""
    plain, penalised = conversions
    prompt = 'class Stack:\n    """A last-in first-out stack."""\n\n    def __init__(self):\n'
    with llama_server(build_server(), plain) as server:
        greedy = _complete(server.url, prompt)
    with llama_server(build_server(), penalised) as server:
        applied = _complete(server.url, prompt)
        overridden = _complete(server.url, prompt, repeat_penalty=1.0)
    assert greedy and applied != greedy
    assert overridden == greedy
