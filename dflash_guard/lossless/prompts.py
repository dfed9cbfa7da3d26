"""Prompt sets for the diff tests: `kernels_ref.prompts` read with dflash-guard's errors.

The endpoint diff sends the prompts as written (`read_prompts`; a chat to the engines'
`/v1/chat/completions`); the local, reference and sampled diffs
need token ids (`load_prompts`), a `messages` prompt rendered with the target's chat template
(`lossless.chat`, after the scan's template checks). Torch-free, so the CLI can read prompt files
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.errors import InputError
from kernels_ref.prompts import Chat, PromptSetError, PromptSpec, prompt_token_ids, read_prompt_set

if TYPE_CHECKING:
    from kernels_ref.tokenizer import Tokenizer


@dataclass(frozen=True)
class Prompt:
    """One tokenized prompt: token ids, an optional own budget, extra stop token ids."""

    id: str
    ids: tuple[int, ...]
    max_new_tokens: int | None = None
    stop_ids: frozenset[int] = frozenset()


def read_prompts(path: Path, chat: bool = False) -> list[PromptSpec]:
    """The prompt set at `path` as written; `InputError` naming file:line on a bad line, or on
    a `messages` prompt unless `chat` (a caller that renders chat templates)."""
    try:
        specs = read_prompt_set(path)
    except PromptSetError as error:
        raise InputError(str(error)) from None
    for spec in specs:
        if isinstance(spec.prompt, Chat) and not chat:
            raise InputError(
                f"{spec.where}: 'messages' prompts are for the local, reference and endpoint "
                "diff tests; give 'prompt' or 'prompt_ids' here"
            )
    return specs


def load_prompts(
    path: Path,
    tokenizer: Tokenizer | None,
    vocab_size: int,
    target_dir: Path | None = None,
) -> list[Prompt]:
    """The prompt set at `path` tokenized; `stop` entries must be ids or single-token strings.

    `messages` prompts need `target_dir` (its chat template) and a tokenizer.
    """
    specs = read_prompts(path, chat=target_dir is not None)
    return [tokenize(spec, tokenizer, vocab_size, target_dir) for spec in specs]


def tokenize(
    spec: PromptSpec,
    tokenizer: Tokenizer | None,
    vocab_size: int,
    target_dir: Path | None = None,
) -> Prompt:
    """`spec` as token ids (`InputError` naming its file:line when it cannot be)."""
    prompt = spec.prompt
    try:
        if isinstance(prompt, Chat):
            prompt = _render(spec, prompt, tokenizer, target_dir)
        ids = prompt_token_ids(prompt, tokenizer, vocab_size)
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


def _render(
    spec: PromptSpec, chat: Chat, tokenizer: Tokenizer | None, target_dir: Path | None
) -> tuple[int, ...]:
    """A chat prompt's ids: the checked template rendered, encoded without added specials."""
    if target_dir is None or tokenizer is None:
        raise InputError(
            f"{spec.where}: 'messages' prompts need the target's tokenizer.json and chat template"
        )
    from dflash_guard.lossless.chat import render_chat  # jinja2 only when a chat is rendered

    try:
        text = render_chat(target_dir, list(chat.messages), list(chat.tools),
                           dict(chat.template_kwargs))
    except InputError as error:
        raise InputError(f"{spec.where}: {error}") from None
    return tuple(tokenizer.encode(text, add_special_tokens=False))
