"""Text view of `fixtures vocab fetch`: the tree and its files, or why the archive was refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import markup_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.pins.llamacpp_source import VocabFetch


def render_vocab_fetch(fetch: VocabFetch, console: Console) -> None:
    """`tree: PATH` and what it holds, or `REFUSED` with both digests."""
    if fetch.tree is None:
        console.print(f"[red]REFUSED[/]: {markup_safe(fetch.url)}: sha256 {fetch.sha256} is "
                      f"not the locked {fetch.locked}; nothing was extracted", highlight=False,
                      soft_wrap=True)
        return
    how = "already in the cache" if fetch.cached else f"sha256 {fetch.sha256} (the locked one)"
    console.print(f"tree: {markup_safe(fetch.tree)}", highlight=False, soft_wrap=True)
    console.print(f"[green]OK[/]: {len(fetch.files)} files from {markup_safe(fetch.url)}, "
                  f"{how}; `fixtures make DIR --vocab qwen3|llama3` reads them", highlight=False,
                  soft_wrap=True)
