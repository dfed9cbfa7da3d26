"""N24: a GGUF's array counts are bounded by the target before any array is read (the reference
diff's tokenizer check, through the bounded `kernels_ref.gguf_reader`), so a huge vocabulary
costs neither time nor memory."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.gguf_vocab import tokenizer_mismatch
from tests.support.scan_builders import write_vocab_gguf


def target_vocab(target: Path) -> list[str]:
    document = json.loads((target / "tokenizer.json").read_text())
    tokens = {i: t for t, i in document["model"]["vocab"].items()}
    tokens.update({a["id"]: a["content"] for a in document["added_tokens"]})
    return [tokens.get(i, f"[PAD{i}]") for i in range(max(tokens) + 1)]


def write_gguf(out: Path, tokens: list[str], merges: list[str] | None = None) -> Path:

    return write_vocab_gguf(out, tokens, merges=merges)


def test_the_targets_own_vocabulary_passes(builtin_pair, tmp_path: Path) -> None:
    target, _ = builtin_pair.target, builtin_pair.drafter
    path = write_gguf(tmp_path / "ok.gguf", target_vocab(target))
    assert tokenizer_mismatch(path, target) is None


def test_more_tokens_than_the_target_is_refused_before_reading(builtin_pair, tmp_path) -> None:
    target, _ = builtin_pair.target, builtin_pair.drafter
    tokens = target_vocab(target) + ["a"] * 200_000  # the target's ids first: only the count lies
    why = tokenizer_mismatch(write_gguf(tmp_path / "big.gguf", tokens), target)
    assert why is not None
    assert "not a conversion of the target: tokenizer.ggml.tokens has 200,260 items; " \
           "the target allows 264" in why


def test_merges_beyond_the_targets_are_refused(builtin_pair, tmp_path: Path) -> None:
    """The target has no merges: llama.cpp's converter writes one placeholder, so up to the
    vocabulary (264) pass; more cannot be a conversion of it."""
    target, _ = builtin_pair.target, builtin_pair.drafter
    path = write_gguf(tmp_path / "one.gguf", target_vocab(target), ["<|bos|> <|endoftext|>"])
    assert tokenizer_mismatch(path, target) is None
    path = write_gguf(tmp_path / "merges.gguf", target_vocab(target), ["a b"] * 1000)
    why = tokenizer_mismatch(path, target)
    assert why is not None and "tokenizer.ggml.merges has 1,000 items; the target allows 264" in why


def header(*pairs: bytes, tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, len(pairs)) + b"".join(pairs)


def string(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # an array claiming 2^62 one-byte items in a 60-byte file
        (header(string("general.name") + struct.pack("<IIQ", 9, 0, 1 << 62)), "are left"),
        (header(string("x") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 40)), "are left"),
        (header(tensors=1 << 40), "over the limits"),
        (header(*[string("k") + struct.pack("<IB", 0, 0)] * 5000), "over the limits"),
        (header(string("nested") + struct.pack("<IIQ", 9, 9, 1) + bytes(32)), "array of arrays"),
        (b"GGML" + bytes(20), "no magic"),
    ],
)
def test_a_header_that_does_not_fit_is_an_input_error(
    builtin_pair, tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(InputError, match=f"cannot read GGUF .*{message}"):
        tokenizer_mismatch(path, builtin_pair.target)


def test_a_gguf_that_is_not_a_regular_file_is_an_input_error(builtin_pair, tmp_path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.gguf")
    with pytest.raises(InputError, match="not a regular file"):
        tokenizer_mismatch(tmp_path / "fifo.gguf", builtin_pair.target)


def test_difftest_reference_refuses_the_oversized_gguf(cli, builtin_pair, tmp_path) -> None:
    """The finding's command: a refusal (exit 1) before any prompt goes to the candidate."""
    target, _ = builtin_pair.target, builtin_pair.drafter
    path = write_gguf(tmp_path / "vocab.gguf", ["a"] * 100_000)
    result = cli("difftest", "reference", "--target", target, "--candidate", "http://127.0.0.1:9",
                 "--gguf", path, "--max-new-tokens", "2", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "refused" and report["prompts"] == 0
    assert "tokenizer.ggml.tokens has 100,000 items" in report["refused"]
