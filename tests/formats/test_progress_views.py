"""The two views of progress: plain lines (CI logs) and rich bars (a terminal)."""

from __future__ import annotations

import io

from dflash_guard.formats.progress import BarProgress, LineProgress, size_text
from dflash_guard.progress import BYTES, stage


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_start_end_and_nest():
    out, clock = io.StringIO(), Clock()
    view = LineProgress(out, clock)
    with stage(view, "gate", 2, "checks"):
        with stage(view, "verify"), stage(view, "hashing target", 2_500_000, BYTES):
            view.advanced(2_500_000, "5/5 files")
            clock.now += 0.25
        view.advanced()
        clock.now += 1.0
    assert out.getvalue().splitlines() == [
        "gate ...",
        "  verify ...",
        "    hashing target ...",
        "    hashing target: 2.5 MB/2.5 MB, 5/5 files (0.2 s)",
        "  verify: done (0.2 s)",
        "gate: 1/2 checks (1.2 s)",
    ]


def test_plain_lines_while_advancing_are_rate_limited():
    out, clock = io.StringIO(), Clock()
    view = LineProgress(out, clock, every_s=5.0)
    view.started("decoding", 12, "prompts")
    for done in range(1, 13):
        clock.now += 1.0
        view.advanced(1, f"tau {done}")
    view.ended()
    assert out.getvalue().splitlines() == [
        "decoding ...",
        "decoding: 5/12 prompts, tau 5",  # five seconds after the start line
        "decoding: 10/12 prompts, tau 10",
        "decoding: 12/12 prompts, tau 12 (12.0 s)",
    ]


def test_plain_lines_escape_control_characters():
    out = io.StringIO()
    view = LineProgress(out, Clock())
    with stage(view, "scanning evil\x1b]0;owned\x07\nforged line"):
        pass
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;owned\\x07\\x0aforged line" in text
    assert len(text.splitlines()) == 2


def test_sizes():
    assert [size_text(n) for n in (0, 999, 1000, 167_136, 16_100_000_000, 2 * 10**15)] == [
        "0 bytes", "999 bytes", "1.0 kB", "167.1 kB", "16.1 GB", "2000.0 TB"]


def test_bars_on_a_terminal_show_each_open_stage_and_clear_at_the_end():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with BarProgress(console) as bars:
        bars.started("gate", 10, "checks")
        bars.started("difftest")
        bars.started("decoding\x1b[2J", 12, "prompts")
        bars.advanced(5, "80 tokens, tau 2.41")
    text = out.getvalue()
    assert "gate" in text and "  difftest" in text
    assert "    decoding\\x1b[2J" in text and "\x1b[2J" not in text  # escaped, not obeyed
    assert "5/12 prompts, 80 tokens, tau 2.41" in text
    assert text.endswith("\x1b[1A\x1b[2K" * 3)  # transient: the three bars erased at the end
