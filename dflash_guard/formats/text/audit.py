"""Text view of `audit`: one line per feed, two per finding, then the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import markup_safe
from dflash_guard.formats.text.findings import SEVERITY_STYLE

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.audit.run import AuditReport


def render_audit(report: AuditReport, console: Console) -> None:
    """Each feed read (or refused), each finding, and the one-line verdict."""

    for feed in report.feeds:
        newest = feed.newest.date().isoformat() if feed.newest else "no records"
        console.print(f"feed {markup_safe(feed.source)}: {len(feed.advisories)} advisories, "
                      f"newest {newest}, {feed.digest[:19]}", highlight=False)
    for problem in report.feed_problems:
        console.print(f"[bold red]feed refused[/]: {markup_safe(problem)}", highlight=False)
    for f in report.findings:
        console.print(f"[{SEVERITY_STYLE[f.severity]}]{f.severity.name}[/] {f.rule_id} "
                      f"{markup_safe(f.advisory)}: {markup_safe(f.subject)}", highlight=False)
        console.print(f"    {markup_safe(f.message)}", highlight=False)
    console.print(report.summary(), highlight=False, markup=False)
