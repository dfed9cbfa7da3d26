"""Text view of `review`: each unreviewed remote-code file with its full sha256 and capability
report, each unreviewed chat template and generation config, then what was written or what to do
next."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import markup_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.trust.review import Review


def render_review(review: Review, console: Console) -> None:
    """One block per file (name, sha256, one line per capability or finding), then the verdict
    line."""
    if not (review.files or review.templates or review.configs):
        console.print(f"[green]OK[/]: no unreviewed remote code, chat template or generation "
                      f"config under `{review.base}`", highlight=False)
        return
    for code in review.files:
        digest = code.sha256 or "no bytes to review (missing)"
        console.print(f"[bold]{markup_safe(code.name)}[/]  sha256 {digest}", highlight=False,
                      soft_wrap=True)
        if not code.scanned:
            console.print("  not scanned: another repository serves it; the lock pins its "
                          "bytes: read it there", highlight=False, soft_wrap=True)
        elif not code.capabilities:
            console.print("  capabilities: none the scan could see", highlight=False)
        if code.can:
            console.print(f"  can: {markup_safe(', '.join(code.can))}", highlight=False)
        for finding in code.capabilities:
            line = f" line {finding.line}" if finding.line else ""
            console.print(f"  {finding.severity.name} {finding.rule_id}{line}: "
                          f"{markup_safe(finding.message)}", highlight=False, soft_wrap=True)
        failing = ", ".join(review.still_failing(code))
        if failing:
            console.print(f"  [yellow]note[/]: the gate still refuses {failing} at fail_on "
                          f"{review.fail_on.name}, reviewed or not (a waiver scan:RULE covers "
                          "it)", highlight=False, soft_wrap=True)
    for template in review.templates:
        console.print(f"[bold]{markup_safe(template.name)}[/]  chat template sha256 "
                      f"{template.sha256}: not a published template of the catalog; read it "
                      "as code (it runs on every request)", highlight=False, soft_wrap=True)
    for config in review.configs:
        digest = config.sha256 or "no bytes to review (unreadable)"
        console.print(f"[bold]{markup_safe(config.name)}[/]  {config.kind} sha256 {digest}: "
                      "what it makes the engine do to every request; read it", highlight=False,
                      soft_wrap=True)
        for finding in config.findings:
            console.print(f"  {finding.severity.name} {finding.rule_id}: "
                          f"{markup_safe(finding.message)}", highlight=False, soft_wrap=True)
    for role in review.denied:
        console.print(f"[yellow]note[/]: `{review.base}` denies remote code for the {role}'s "
                      "tier: reviewed or not, the gate refuses it (the tier comes from "
                      "local_tier or the Hub organisation: docs/policies.md)", highlight=False,
                      soft_wrap=True)
    count = len(review.files)
    files = "file" if count == 1 else "files"
    configs = f"defaults or tokenizer file{'s' if len(review.configs) != 1 else ''}"
    listed = f"{count} remote-code {files}" + (
        f", {len(review.templates)} chat template{'s' if len(review.templates) != 1 else ''}"
        if review.templates else "") + (
        f", {len(review.configs)} {configs}" if review.configs else "")
    if review.written is not None:
        console.print(f"[green]WRITTEN[/]: {markup_safe(review.written)} extends "
                      f"`{review.base}` with {len(review.reviewable)} reviewed remote-code "
                      f"{files}, "
                      f"{len(review.templates)} reviewed templates and "
                      f"{sum(bool(c.sha256) for c in review.configs)} reviewed {configs}; "
                      f"gate with --policy ./{markup_safe(review.written)}", highlight=False,
                      soft_wrap=True)
    if not review.passed:
        console.print(f"[red]UNREVIEWED[/]: {listed}; read each, then run "
                      "again with --reviewer YOU --output my-policy.yaml", highlight=False,
                      soft_wrap=True)
