"""An independent (non-byte) `tokenizer.json` for random-weight targets: a word-level vocabulary
(newline and "(" single tokens, as in real vocabularies, so the default prompts' stops resolve)
with added special tokens and a BOS-adding post-processor, built with `tokenizers` itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Sequence, Split
from tokenizers.processors import TemplateProcessing

WORDS = [
    "hello", "world", "def", "return", "the", "a", "user", "assistant", "x", "Hi", "there",
    "\n", "(",
]
SPECIALS = {"<s>": 250, "</s>": 251, "<|im_start|>": 252, "<|im_end|>": 253, "<unk>": 254}
CHAT_TEMPLATE = (
    "{%- for message in messages %}<|im_start|> {{ message['role'] }} {{ message['content'] }}"
    " <|im_end|> {% endfor -%}{%- if add_generation_prompt %}<|im_start|> assistant{% endif %}"
)


def write_word_tokenizer(
    target_dir: Path, *, add_bos: bool | None = None, chat_template: str = CHAT_TEMPLATE
) -> Tokenizer:
    """Write `tokenizer.json` (BOS added by the post-processor, as Llama 3 does) and
    `tokenizer_config.json` (`add_bos_token` when given, the chat template) into `target_dir`."""
    vocab = {word: i + 10 for i, word in enumerate(WORDS)} | SPECIALS
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    # Words split at spaces (dropped); every other non-word character is a piece of its own.
    tokenizer.pre_tokenizer = Sequence(
        [Split(" ", "removed"), Split(Regex(r"[^\w]"), "isolated")]
    )
    tokenizer.add_special_tokens([AddedToken(name, special=True) for name in SPECIALS])
    tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", SPECIALS["<s>"])]
    )
    tokenizer.save(str(target_dir / "tokenizer.json"))
    config: dict[str, Any] = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "chat_template": chat_template,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if add_bos is not None:
        config["add_bos_token"] = add_bos
    (target_dir / "tokenizer_config.json").write_text(json.dumps(config))
    return tokenizer
