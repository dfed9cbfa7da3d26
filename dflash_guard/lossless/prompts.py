"""Prompt sets for the diff tests: `kernels_ref.prompts` read with dflash-guard's errors.

The endpoint diff sends the prompts as written (`read_prompts`); the local and sampled diffs
need token ids (`load_prompts`). Torch-free, so the CLI can read prompt files without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.errors import InputError
from kernels_ref.prompts import PromptSetError, PromptSpec, prompt_token_ids, read_prompt_set

if TYPE_CHECKING:
    from kernels_ref.tokenizer import ByteTokenizer


@dataclass(frozen=True)
class Prompt:
    """One tokenized prompt: token ids, an optional own budget, extra stop token ids."""

    id: str
    ids: tuple[int, ...]
    max_new_tokens: int | None = None
    stop_ids: frozenset[int] = frozenset()


def read_prompts(path: Path) -> list[PromptSpec]:
    """The prompt set at `path` as written; `InputError` naming file:line on a bad line."""
    try:
        return read_prompt_set(path)
    except PromptSetError as error:
        raise InputError(str(error)) from None


def load_prompts(path: Path, tokenizer: ByteTokenizer | None, vocab_size: int) -> list[Prompt]:
    """The prompt set at `path` tokenized; `stop` entries must be ids or single-token strings."""
    return [tokenize(spec, tokenizer, vocab_size) for spec in read_prompts(path)]


def tokenize(spec: PromptSpec, tokenizer: ByteTokenizer | None, vocab_size: int) -> Prompt:
    """`spec` as token ids (`InputError` naming its file:line when it cannot be)."""
    try:
        ids = prompt_token_ids(spec.prompt, tokenizer, vocab_size)
    except PromptSetError as error:
        raise InputError(f"{spec.where}: {error}") from None
    stop_ids = set()
    for stop in spec.stop:
        token = tokenizer.token_id(stop) if isinstance(stop, str) and tokenizer else stop
        if not isinstance(token, int):
            raise InputError(
                f"{spec.where}: stop {stop!r} is not a single token id of this tokenizer"
            )
        stop_ids.add(token)
    return Prompt(spec.id, ids, spec.max_new_tokens, frozenset(stop_ids))
