"""Text view of `verify`: one line per role, the files that differ, each signature checked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from dflash_guard.formats.terminal import markup_safe, terminal_safe
from dflash_guard.formats.text.signature import plain_reason

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.pins.verify import VerifyReport
    from dflash_guard.trust.verified import VerifiedLock


def _how_checked(report: VerifyReport) -> str:
    """How the digests were got: all hashed now, or some from the stat cache. The cache answers
    for a file hashed before (by `lock` too, so on the first `verify` after it) whose size,
    mtime, ctime and inode are unchanged; the gate never reads it."""
    cached, hashed = report.cache_hits, report.files_checked - report.cache_hits
    if not cached:
        return ", every byte hashed"
    now = f"{hashed} hashed now, " if hashed else ""
    return (f" ({now}{cached} unchanged since an earlier lock or verify hashed them: "
            "the stat cache; --no-cache hashes every byte)")


def render_verify(result: VerifiedLock, console: Console) -> None:
    """Where each role was found, the verdict on the files, then one line per signature."""
    report = result.report
    for role, folder in sorted(report.locations.items()):
        console.print(f"{role:8} {terminal_safe(str(folder))}", highlight=False, markup=False)
    if report.passed:
        console.print(f"[green]OK[/]: {report.files_checked} files match the lockfile"
                      f"{_how_checked(report)}", highlight=False, soft_wrap=True)
    else:
        table = Table(title="files that differ from the lockfile")
        for column in ("role", "path", "problem", "expected", "actual"):
            table.add_column(column, overflow="fold")
        for p in report.problems:
            cells = (p.role, p.path, p.kind, p.expected, p.actual)
            table.add_row(*(markup_safe(cell or "") for cell in cells))
        console.print(table)
        console.print(f"[red]MISMATCH[/]: {len(report.problems)} problem(s)")
    for check in result.signatures:
        what = markup_safe(f"{check.subject} ({Path(check.signature).name})")
        if check.unchecked:
            console.print(f"[yellow]UNCHECKED SIGNATURE[/]: {what}: "
                          f"{markup_safe(check.reason)}", highlight=False, soft_wrap=True)
        elif check.ok:
            console.print(f"[green]signed[/]: {what} by {markup_safe(str(check.signer))}",
                          highlight=False, soft_wrap=True)
        else:
            console.print(f"[red]BAD SIGNATURE[/]: {what}: "
                          f"{markup_safe(plain_reason(check.reason))}",
                          highlight=False, soft_wrap=True)
