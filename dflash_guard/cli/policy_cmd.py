"""`dflash-guard policy check FILE` and `dflash-guard policy show [FILE]`."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, stdout
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.json import print_json
from dflash_guard.formats.text.policy import render_policy_check
from dflash_guard.trust.policy import PolicyCheck, load_policy

policy_app = typer.Typer(
    help="Validate or show a deploy policy.", no_args_is_help=True, add_completion=False
)

FormatOption = Annotated[PlainFormat, typer.Option("--format", help="Report format.")]


@policy_app.command("check")
def check(
    file: Annotated[str, typer.Argument(help="A built-in name (default, strict, dev), or a "
                                        "policy file given as a path (./p.yaml).")],
    output: FormatOption = PlainFormat.text,
) -> None:
    """Validate a policy: exit 0 valid, 1 valid but a waiver has expired, 2 invalid.

    Example: dflash-guard policy check strict
    """
    policy = load_policy(file)
    finish(PolicyCheck(policy, policy.expired_waivers(dt.datetime.now(dt.UTC).date())),
           output, render_policy_check)


@policy_app.command("show")
def show(
    file: Annotated[str | None, typer.Argument(help="Policy file or built-in name; default: "
                                               "the built-in default policy.")] = None,
    output: FormatOption = PlainFormat.text,
) -> None:
    """Print the effective policy as a file `policy check` accepts (source and digest as
    comments); save it as a start for your own (or write `extends: NAME` and your changes).

    Example: dflash-guard policy show strict --format json
    """
    policy = load_policy(file)
    if output is PlainFormat.json:
        print_json(policy.to_json())
    else:
        stdout.out(policy.to_yaml(), end="", highlight=False)


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.add_typer(policy_app, name="policy")
