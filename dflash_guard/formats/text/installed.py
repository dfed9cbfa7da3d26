"""Text view of `verify-installed`: the files that did not prove out, how far the proof goes
(the locked wheel, or RECORD only), then each code file's capabilities."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import markup_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.trust.installed import InstalledCheck


def render_installed(check: InstalledCheck, console: Console) -> None:
    """One line per problem, the proof line, the capability summary, one block per code file
    with findings, then the verdict line."""

    def say(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    say(f"{markup_safe(check.name)} {markup_safe(check.version)} "
        f"({markup_safe(check.dist_info)})")
    for problem in check.problems:
        say(f"  [red]{problem.kind}[/] {markup_safe(problem.path)}: {markup_safe(problem.detail)}")
    say(f"proof: {markup_safe(check.wheel_note)}")
    for path in check.installer_files:
        say(f"  written by the installer, not in the wheel (RECORD-only): {markup_safe(path)}")
    for kind, places in check.capabilities().items():
        say(f"{kind}: {markup_safe(', '.join(places)) if places else 'none the scan could see'}")
    for code in check.code:
        if not code.findings:
            continue
        say(f"[bold]{markup_safe(code.path)}[/]  sha256 {code.sha256}")
        for finding in code.findings:
            line = f" line {finding.line}" if finding.line else ""
            say(f"  {finding.severity.name} {finding.rule_id}{line}: "
                f"{markup_safe(finding.message)}")
    files = "file" if check.files_checked == 1 else "files"
    if check.passed:
        say(f"[green]OK[/]: {check.files_checked} {files} match RECORD and the locked wheel; "
            "the capabilities above are for review, not a verdict")
    elif check.verdict == "cannot-tell":
        say(f"[red]CANNOT TELL[/]: {check.files_checked} {files} match RECORD, and RECORD "
            "matches nothing the lock pins: no wheel with the locked sha256 was found (give it "
            "with --wheel or --wheelhouse)")
    else:
        count = len(check.problems)
        say(f"[red]MISMATCH[/]: {count} {'problem' if count == 1 else 'problems'} in "
            f"{check.files_checked} {files}")
