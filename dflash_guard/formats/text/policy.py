"""Text view of `policy check`: the policy is valid; what makes the gate refuse it as it stands
(nobody to sign, an expired waiver)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.trust.policy import is_builtin

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.trust.policy import PolicyCheck


def render_policy_check(report: PolicyCheck, console: Console) -> None:
    """`SOURCE: valid (policy NAME, DIGEST)`, then one line per expired waiver."""
    policy = report.policy
    console.print(f"{policy.source}: valid (policy {policy.name!r}, {policy.digest})",
                  highlight=False, soft_wrap=True, markup=False)
    # `extends` names a built-in policy only: a copy (`policy show`) is edited instead
    fix = (f"write a policy with extends: {policy.name} that names your signers"
           if is_builtin(policy) else "name your signers in it")
    for why in policy.unsatisfiable:
        console.print(f"  the gate refuses it as it stands: {why}; {fix}",
                      highlight=False, soft_wrap=True, markup=False)
    for waiver in report.expired:
        console.print(f"  waiver {waiver.id} ({waiver.covers}) expired on "
                      f"{waiver.expires.isoformat()}: the gate will refuse",
                      highlight=False, soft_wrap=True, markup=False)
