"""Text view of `verify-app`: what the image's signature says, each problem, the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.formats.terminal import markup_safe

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.trust.apple.image import AppImageCheck


def render_app(check: AppImageCheck, console: Console) -> None:
    """The image and its digest, the signature's facts, one line per problem, the verdict."""

    def say(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    say(f"{markup_safe(check.image)}  {check.size:,} bytes  sha256 {check.sha256}")
    facts = (("identifier", check.identifier), ("team", check.team_id),
             ("signer", check.signer),
             ("anchor", {"apple": "Apple's roots", "policy": "the policy's roots"}.get(
                 check.anchor or "")), ("lock", check.lock))
    for label, value in facts:
        if value:
            say(f"  {label}: {markup_safe(value)}")
    if check.timestamp:
        say(f"  signed at: {check.signing_time} (timestamped by {markup_safe(check.timestamp)})")
    elif check.signing_time:
        token = "its timestamp token refused" if check.timestamp_token else "no timestamp token"
        say(f"  signed at: {check.signing_time} (the signer's claim; {token})")
    for hash_name, cdhash in check.code_directories:
        say(f"  code directory ({hash_name}): cdhash {cdhash}")
    for depth, subject in enumerate(check.chain[1:], 1):
        say(f"  {'  ' * depth}issued by {markup_safe(subject)}")
    if check.ticket is None:
        say("  notarization: no ticket stapled")
    else:
        names = "names" if check.ticket.names_cdhash else "does not name"
        say(f"  notarization: a {check.ticket.size:,}-byte ticket stapled (magic "
            f"{markup_safe(check.ticket.magic)}), which {names} this cdhash; its Apple "
            "signature and freshness are not checked offline")
    for problem in check.problems:
        say(f"  [red]problem[/]: {markup_safe(problem)}")
    if check.passed:
        say("[green]VERIFIED[/]: signature, chain and team hold (revocation not checked "
            "offline)")
    else:
        count = len(check.problems)
        say(f"[red]NOT VERIFIED[/]: {count} {'problem' if count == 1 else 'problems'}")
