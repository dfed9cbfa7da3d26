"""Text views of the five difftest reports: local, sampled, endpoint, reference and isolation.

Every view that lists divergences uses `divergence_line` (where the two decodes first part, and
the reference's top-2 margin there), and every view ends with `verdict_line`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from dflash_guard.formats.terminal import markup_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.lossless.endpoint import EndpointDiffReport
    from dflash_guard.lossless.endpoint.metrics import ResponseDrafts
    from dflash_guard.lossless.isolation import IsolationReport
    from dflash_guard.lossless.local import DifftestReport
    from dflash_guard.lossless.reference_diff import ReferenceDiffReport
    from dflash_guard.lossless.result import ClassifiedResults, PromptResult, Token
    from dflash_guard.lossless.sampled import SampledReport


def _token(token: Token | None) -> str:
    return "<end of output>" if token is None else markup_safe(repr(token) if isinstance(
        token, str) else token)


def divergence_line(result: PromptResult, reference: str, candidate: str,
                    margin_of: str | None = None) -> str:
    """`STATUS PROMPT: first at generated token N: REFERENCE x, CANDIDATE y, R top-2 margin m`
    (yellow for a near-tie, red for a hard divergence; R is `margin_of`, else `reference`)."""
    d = result.divergence
    assert d is not None
    colour = "yellow" if d.near_tie else "red"
    where = "the same tokens, different text" if d.position is None else (
        f"first at generated token {d.position}")
    margin = "" if d.margin is None else f", {margin_of or reference} top-2 margin {d.margin:.4g}"
    return (f"[{colour}]{result.status}[/] {markup_safe(result.prompt_id)}: {where}: "
            f"{reference} {_token(d.reference_token)}, {candidate} "
            f"{_token(d.candidate_token)}{margin}")


def verdict_line(report: ClassifiedResults, *, passed: bool, identical: str = "identical",
                 failed: str = "DIVERGED") -> str:
    """`verdict: identical`, `verdict: N near-tie(s), no hard divergence`, or
    `verdict: DIVERGED: H hard, N near-tie(s)`."""
    hard, ties = len(report.hard_divergences), len(report.near_ties)
    if not report.hard_divergences and not report.near_ties and passed:
        return f"verdict: [green]{identical}[/]"
    if passed:
        return f"verdict: [yellow]{ties} near-tie(s)[/], no hard divergence"
    return f"verdict: [red]{failed}[/]: {hard} hard, {ties} near-tie(s)"


def _warnings(warnings: tuple[str, ...] | list[str], console: Console) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {markup_safe(warning)}", highlight=False)


def _drafts(drafts: ResponseDrafts | None, who: str, console: Console) -> None:
    if drafts is not None:
        console.print(f"{who} report {drafts.accepted_tokens} of {drafts.draft_tokens} drafted "
                      f"tokens accepted ({drafts.responses} responses)", highlight=False)


def render_local(report: DifftestReport, console: Console) -> None:
    """A per-prompt table, each divergence, the acceptance summary, warnings and the verdict."""
    table = Table(title=f"difftest (block size {report.block_size})")
    for column in ("prompt", "identical", "tau", "steps", "target forwards AR/spec"):
        table.add_column(column, no_wrap=True)
    for r in report.results:
        stats = r.speculation
        assert stats is not None  # the local diff always speculates
        table.add_row(markup_safe(r.prompt_id), "yes" if r.identical else "[red]NO[/]",
                      f"{stats.tau:.2f}", str(stats.steps),
                      f"{stats.target_forwards_ar}/{stats.target_forwards_spec}")
    console.print(table)
    for r in report.divergences:
        console.print(divergence_line(r, "autoregressive", "speculative", "target"),
                      highlight=False)
    histogram = " ".join(f"{k}:{v}" for k, v in report.histogram.items())
    console.print(f"tau {report.tau:.2f}   histogram {histogram}", highlight=False)
    saved = report.target_forwards_ar - report.target_forwards_spec
    console.print(f"target forwards: {report.target_forwards_ar} autoregressive, "
                  f"{report.target_forwards_spec} speculative ({saved} saved)", highlight=False)
    if report.inject:
        console.print(f"injected fault: {report.inject} ({report.inject.description})",
                      highlight=False)
    _warnings(report.warnings, console)
    if report.identical and not report.passed:
        console.print("verdict: [red]FAILED[/]: identical, but --fail-on-warning and a warning")
    elif report.identical:
        console.print("verdict: [green]identical[/]")
    else:
        console.print(f"verdict: [red]DIVERGED[/] on {len(report.divergences)} of "
                      f"{len(report.results)} prompts")


def render_sampled(report: SampledReport, console: Console) -> None:
    """One row per prompt (its joint chi-square test), then the verdict."""
    table = Table(title=f"sampled exactness ({report.samples} draws x {report.tokens} tokens, "
                  f"alpha {report.alpha}: {report.per_test_alpha:.2g} per test)")
    for column in ("prompt", "joint chi2", "dof", "min p-value", "accepted/step", "verdict"):
        table.add_column(column)
    for r in report.results:
        accepted = "" if r.mean_accepted is None else f"{r.mean_accepted:.2f}"
        table.add_row(markup_safe(r.prompt_id), f"{r.test.statistic:.1f}", str(r.test.dof),
                      f"{r.p_value:.3g}", accepted, "[red]biased[/]" if r.rejected else "ok")
    console.print(table)
    if report.cannot_tell:
        console.print("verdict: [yellow]cannot tell[/]: every test had 0 degrees of freedom (no "
                      "power); draw more samples or longer continuations")
        return
    console.print("verdict: " + ("[green]consistent with exact sampling[/]" if report.passed
                                 else "[red]speculative sampling is biased[/]"))


def render_endpoint(report: EndpointDiffReport, console: Console) -> None:
    """Each prompt that is not identical, the candidate's acceptance, warnings, the verdict."""
    console.print(f"baseline {markup_safe(report.baseline)}  vs  candidate "
                  f"{markup_safe(report.candidate)} ({len(report.results)} prompts, compared "
                  f"by {', '.join(sorted({r.compared_by for r in report.results})) or 'nothing'})",
                  highlight=False)
    for r in report.results:
        if r.divergence is not None:
            console.print(divergence_line(r, "baseline", "candidate"), highlight=False)
    if report.acceptance is not None:
        a = report.acceptance
        tau = "n/a" if a.mean_acceptance_length is None else f"{a.mean_acceptance_length:.2f}"
        rate = "n/a" if a.acceptance_rate is None else f"{a.acceptance_rate:.3f}"
        console.print(f"candidate acceptance ({markup_safe(a.source)}): tau {tau}, acceptance "
                      f"rate {rate}", highlight=False)
        if a.acceptance_curve:
            curve = " ".join(f"{share:.2f}" for share in a.acceptance_curve)
            console.print(f"acceptance by draft position: {curve}", highlight=False)
    _drafts(report.response_drafts, "candidate responses", console)
    _warnings(report.warnings, console)
    console.print(verdict_line(report, passed=report.passed), highlight=False)


def render_reference(report: ReferenceDiffReport, console: Console) -> None:
    """A refusal, or each divergence and the engine's draft counts, then the verdict."""
    console.print(f"reference {markup_safe(report.target)} (kernels_ref)  vs  engine "
                  f"{markup_safe(report.candidate)} ({len(report.results)} prompts)",
                  highlight=False)
    if report.refused is not None:
        console.print(f"verdict: [red]refused before any diff[/]: {markup_safe(report.refused)}",
                      highlight=False)
        return
    for r in report.results:
        if r.divergence is not None:
            console.print(divergence_line(r, "reference", "engine"), highlight=False)
    _logprobs(report, console)
    if report.drafter is not None and report.drafter.engine_tau is not None:
        console.print(f"drafter: the engine's tau {report.drafter.engine_tau:.3g}, kernels_ref's "
                      f"with the locked drafter {report.drafter.reference_tau:.3g} (at least "
                      f"{report.drafter.min_ratio:g} times it expected)", highlight=False)
    _drafts(report.response_drafts, "engine responses", console)
    _warnings(report.warnings, console)
    if report.wrong_model is not None:
        from dflash_guard.lossless.logprob_check import WRONG_MODEL

        evidence = report.wrong_model.removeprefix(WRONG_MODEL + ": ")
        console.print(f"verdict: [red]NOT THE LOCKED MODEL[/] ({len(report.hard_divergences)} "
                      f"hard, {len(report.near_ties)} near-tie(s)): {markup_safe(evidence)}",
                      highlight=False)
        return
    if report.wrong_drafter is not None:
        console.print(f"verdict: [red]NOT THE LOCKED DRAFTER[/]: "
                      f"{markup_safe(report.wrong_drafter)}", highlight=False)
        return
    console.print(verdict_line(report, passed=report.passed), highlight=False)


def _logprobs(report: ReferenceDiffReport, console: Console) -> None:
    """The largest logprob difference from the reference, where it is, and the tolerance."""
    check = report.logprobs
    if check is None:
        return
    worst = check.worst
    where = ("no value compared" if worst is None else
             f"{worst.delta:.3g} nats at {markup_safe(worst.prompt_id)} position "
             f"{worst.position} (token {worst.token}"
             f"{'' if worst.committed else ', a top-k alternative'})")
    console.print(f"logprobs: largest difference from kernels_ref {where}; {check.values} values "
                  f"compared; tolerance {check.tolerance:g} ({markup_safe(check.tolerance_from)})",
                  highlight=False)


def render_isolation(report: IsolationReport, console: Console) -> None:
    """Each prompt whose output among other tenants left its solo run, then the verdict."""
    console.print(f"candidate {markup_safe(report.candidate)}: {len(report.results)} prompts "
                  f"alone, then among {report.tenants} prefix-sharing tenants at concurrency "
                  f"{report.concurrency}", highlight=False)
    for r in report.results:
        if r.divergence is not None:
            console.print(divergence_line(r, "alone", "among tenants", "solo"), highlight=False)
    if report.cannot_tell:
        console.print("verdict: [yellow]cannot tell[/]: no prompt was long enough to share a "
                      "prefix with another tenant, so nothing was tested")
        return
    console.print(verdict_line(report, passed=report.passed,
                               identical="identical: no output depends on another request",
                               failed="NOT ISOLATED"), highlight=False)
