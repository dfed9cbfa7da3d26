"""Text view of `verify-approval`: the record's policy, each signature, the files, one verdict."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.formats.text.signature import plain_reason, unchecked_approval

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.trust.provenance import ApprovalVerdict


def render_approval(verdict: ApprovalVerdict, console: Console) -> None:
    """`approval record R (policy P, uri, digest):`, the policy binding, a line per signature and
    per file problem, how many approved files match, then `VERIFIED` or `NOT VERIFIED`."""
    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    named = verdict.record_policy
    digest = str(named.get("digest", {}).get("sha256", "?"))[:12]
    say(f"approval record {verdict.record} (policy {named.get('name')}, {named.get('uri')}, "
        f"sha256:{digest}...):")
    if verdict.policy_problem is None:
        say(f"  policy: the record is about {verdict.policy}")
    else:
        say(f"  WRONG POLICY: {verdict.policy_problem}")
    for check in verdict.signatures:
        if not check.signature:
            say(f"  NOT SIGNED: {check.reason.removeprefix('not signed: ')}")
            continue
        if check.ok:
            line = f"signed by {check.signer}"
        elif unchecked_approval(check.reason):
            line = ("UNCHECKED SIGNATURE: the policy names no approval public key, so nobody "
                    "checked it (list the signer under signatures.approvals)")
        else:
            line = f"BAD SIGNATURE: {plain_reason(check.reason)}"
        say(f"  {Path(check.signature).name}: {line}")
    for problem in verdict.problems:
        say(f"  {problem}")
    if verdict.checked is not None:
        say(f"  files: {verdict.checked} approved files match the disk"
            + (f", {len(verdict.problems)} problem(s)" if verdict.problems else ", nothing else"))
    say("VERIFIED" if verdict.passed else "NOT VERIFIED")
