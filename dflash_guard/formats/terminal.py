"""Untrusted strings made safe for a terminal: the one place text output escapes them.

File names, lockfile paths, repo names, server answers and error messages can carry control
characters: `ESC]0;...BEL` retitles the terminal, `ESC[2J` clears it, CR overwrites a line, C1
controls and bidi overrides (`U+202E`) reorder what the reader sees. Rich's markup escaping does
not touch them, and rich strips only a few (BEL, BS, CR). `terminal_safe` shows every control,
format (bidi, zero-width) and line/paragraph-separator character as a visible `\\xNN`/`\\uNNNN`
escape. `safe_console` makes a rich console that applies it to every string it renders, so a
renderer that forgets cannot leak one; renderers also call it on single-line values so a newline
cannot forge a line. rich is imported only when a console is made (start-up stays light).
"""

from __future__ import annotations

import functools
import unicodedata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

# Unicode categories never shown raw: controls (C0, DEL, C1), format characters (bidi
# overrides and isolates, zero-width joiners, LRM/RLM), line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else (
        f"\\U{code:08x}")


def terminal_safe(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control, format and separator character shown as an escape;
    `keep_newlines` leaves `\\n` and `\\t` (for multi-line output the tool itself composed)."""
    if text.isprintable():
        return text
    kept = "\n\t" if keep_newlines else ""
    return "".join(
        char if char in kept or unicodedata.category(char) not in _HIDDEN_CATEGORIES
        else _escaped(char)
        for char in text
    )


def markup_safe(text: object) -> str:
    """An untrusted value to embed in rich markup: terminal-safe and markup-escaped."""
    from rich.markup import escape

    return escape(terminal_safe(str(text)))


# The width of tables printed off a terminal (a CI log, a pipe, a file): wide enough that no row
# wraps, so a sha256 a user pastes into a policy and a file name stay whole on one line (rich
# would fold them at 80 columns). A table is as wide as its content, never this wide.
OFF_TERMINAL_WIDTH = 4096


def stream_width(stream: Any) -> int | None:
    """The console width for `stream`: None (rich asks the terminal) on a terminal or when
    `COLUMNS` says, `OFF_TERMINAL_WIDTH` otherwise."""
    import os

    isatty = getattr(stream, "isatty", None)
    if os.environ.get("COLUMNS") or (isatty is not None and isatty()):
        return None
    return OFF_TERMINAL_WIDTH


def safe_console(**options: Any) -> Console:
    """A rich `Console(**options)` that passes every string it renders through `terminal_safe`
    (newlines kept), whether printed directly, as a table cell or as a title."""
    return _safe_console_class()(**options)


@functools.cache
def _safe_console_class() -> type[Console]:
    from rich.console import Console
    from rich.text import Text

    class SafeConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Text:
            return super().render_str(terminal_safe(text, keep_newlines=True), **kwargs)

    return SafeConsole
