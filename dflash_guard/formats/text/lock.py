"""Text view of `lock`: one line per locked artifact, then the file written."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import terminal_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.pins.lockfile import Lockfile


def render_lock(lockfile: Lockfile, output: Path, console: Console) -> None:
    """Each artifact (role, label, files; a Hub pin the cache could not confirm says so)."""
    for a in lockfile.artifacts:
        note = ""
        if a.source == "hub" and not a.hub_confirmed:
            note = ("; cache-unconfirmed: trusted as a local folder until confirmed "
                    "(lock it online, or --confirmed-by an earlier online lock)")
        console.print(f"{a.role:8} {terminal_safe(a.label)}  ({len(a.files)} files{note})",
                      highlight=False, markup=False)
    console.print(f"wrote {terminal_safe(str(output))} ({lockfile.digest()})", highlight=False,
                  markup=False)
