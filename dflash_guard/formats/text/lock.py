"""Text view of `lock`: one line per locked artifact, then the file written (or the refusal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import markup_safe, terminal_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.pins.resolve import LockReport


def render_lock(report: LockReport, console: Console) -> None:
    """Each artifact (role, label, files; a Hub pin the cache could not confirm says so), or
    why nothing was locked."""
    lockfile = report.lock
    if lockfile is None:
        console.print(f"[bold red]refused:[/] {markup_safe(report.outcome.reason)}",
                      highlight=False, soft_wrap=True)
        return
    for a in lockfile.artifacts:
        note = ""
        if a.source == "hub" and not a.hub_confirmed:
            note = ("; cache-unconfirmed: the policy's cache_tier until confirmed "
                    "(lock it online, or --confirmed-by an earlier online lock)")
        console.print(f"{a.role:8} {terminal_safe(a.label)}  ({len(a.files)} files{note})",
                      highlight=False, markup=False)
    console.print(f"wrote {terminal_safe(str(report.output))} ({lockfile.digest()})",
                  highlight=False, markup=False)
