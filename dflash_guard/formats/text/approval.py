"""Text view of `verify-approval`: each signature, each subject that differs, one verdict line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.trust.provenance import ApprovalVerdict


def render_approval(verdict: ApprovalVerdict, console: Console) -> None:
    """`approval record R under policy P:`, a line per signature and problem, then
    `VERIFIED` (with the files checked) or `NOT VERIFIED`."""
    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    say(f"approval record {verdict.record} under policy {verdict.policy}:")
    for check in verdict.signatures:
        line = f"signed by {check.signer}" if check.ok else f"BAD SIGNATURE: {check.reason}"
        say(f"  {Path(check.signature).name}: {line}")
    for problem in verdict.problems:
        say(f"  {problem}")
    files = f", {verdict.checked} approved files match the disk" if verdict.checked else ""
    say(("VERIFIED" + files) if verdict.passed else "NOT VERIFIED")
