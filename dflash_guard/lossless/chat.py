"""Chat prompts: a prompt's `messages` rendered with the target's own chat template, then tokenized.

The template is read where transformers reads it (`chat_template.jinja` and
`additional_chat_templates/*.jinja`, else `tokenizer_config.json`'s `chat_template`, a string or
the `default` (`tool_use` with tools) of a `[{name, template}]` list) and must pass
the scan's template checks first: a template the scan flags is refused, never rendered. Rendering
is as transformers' `apply_chat_template` does it: jinja2's `ImmutableSandboxedEnvironment` with
`trim_blocks`, `lstrip_blocks`, the `loopcontrols` extension and the `{% generation %}` tag,
`tojson`, `raise_exception`, `strftime_now`, the tokenizer's special tokens as variables,
`add_generation_prompt=True`, the prompt's `tools` (when it has any) and its
`chat_template_kwargs` (e.g. `enable_thinking`), under the render budget of
`templates.sandbox` (steps, output and value sizes, wall time: past it, or on any failure,
an input error naming the template); the text is then encoded without adding special tokens
(the template writes them). kernels_ref never renders templates (it must not
import dflash_guard): it is handed the ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.fileio import MAX_JSON_BYTES, read_input_json, read_input_text
from dflash_guard.templates.grammar import check_template
from dflash_guard.templates.locate import template_files, templates_in_config
from dflash_guard.templates.sandbox import TemplateRenderError, render_template

SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


def read_chat_template(target_dir: Path, tools: bool = False) -> tuple[str, str]:
    """`(where, source)` of the template transformers would apply; `InputError` when it has none.

    As transformers loads them: template files (`chat_template.jinja` as `default`, then each
    `additional_chat_templates/NAME.jinja` as `NAME`, a `default.jinja` there overriding it)
    take priority over `tokenizer_config.json`; of named templates, `tool_use` when the prompt
    has tools, else `default`."""
    files = template_files(target_dir)
    if files:
        path = (files.get("tool_use") if tools else None) or files.get("default")
        if path is None:
            raise InputError(f"{target_dir}: the target has several chat templates and no "
                             f"default ({', '.join(sorted(files))})")
        return str(path), read_input_text(path, "chat template")
    config_path = target_dir / "tokenizer_config.json"
    config = _read_config(config_path)
    named = dict(templates_in_config(config))
    source = (named.get("chat_template[tool_use]") if tools else None) or named.get(
        "chat_template") or named.get("chat_template[default]")
    if source is None:
        raise InputError(f"{target_dir}: the target has no chat template for 'messages' prompts")
    return str(config_path), source


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    config = read_input_json(path, "tokenizer config", MAX_JSON_BYTES)
    return config if isinstance(config, dict) else {}


def special_tokens(target_dir: Path) -> dict[str, str]:
    """The template variables `bos_token`, `eos_token`, ... from `tokenizer_config.json`."""
    config = _read_config(target_dir / "tokenizer_config.json")
    tokens = {}
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[name] = value
    return tokens


def render_chat(target_dir: Path, messages: list[dict[str, Any]],
                tools: list[dict[str, Any]] | None = None,
                template_kwargs: dict[str, Any] | None = None) -> str:
    """The prompt text of `messages` (with `tools` and extra template variables) under the
    target's chat template, after the scan's checks passed (`InputError` names the first
    finding otherwise)."""
    where, source = read_chat_template(target_dir, tools=bool(tools))
    variables = {**special_tokens(target_dir), **(template_kwargs or {})}
    reserved = {"messages", "tools", "add_generation_prompt"} & set(template_kwargs or {})
    if reserved:
        raise InputError(f"chat_template_kwargs may not set {sorted(reserved)[0]!r}")
    variables["tools"] = tools or None  # transformers passes both, None when absent
    variables["documents"] = None
    findings = check_template(source, where)
    if findings:
        first = findings[0]
        raise InputError(
            f"{where}: the chat template is refused by the scan ({first.rule_id}: "
            f"{first.message}); it is never rendered"
        )
    try:
        return render_template(source, where, {"messages": messages,
                                               "add_generation_prompt": True, **variables})
    except TemplateRenderError as error:
        raise InputError(str(error)) from None
