"""`dflash-guard policy check FILE` and `dflash-guard policy show [FILE]`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, stdout
from dflash_guard.cli.options import Json, Quiet, chosen_format
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.json import print_json
from dflash_guard.formats.text.policy import render_policy_check
from dflash_guard.trust.policy import PolicyCheck, load_policy

policy_app = typer.Typer(
    help="Validate or show a deploy policy.", no_args_is_help=True, add_completion=False
)

FormatOption = Annotated[PlainFormat, typer.Option("--format", metavar="[text|json]",
                                                   help="Report format.")]


@policy_app.command("check")
def check(
    file: Annotated[str, typer.Argument(metavar="POLICY",
                                        help="A built-in name (default, strict, dev), or a "
                                             "policy file given as a path (./p.yaml).")],
    output: FormatOption = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
) -> None:
    """Validate a policy: exit 0 valid, 1 valid but the gate refuses it as it stands (a waiver
    has expired, or a signature is required and no signer is named), 2 invalid.

    Example: dflash-guard policy check dev
    """
    output = chosen_format(output, as_json)
    policy = load_policy(file)
    finish(PolicyCheck(policy, policy.expired_waivers(dt.datetime.now(dt.UTC).date())),
           output, render_policy_check)


@policy_app.command("show")
def show(
    file: Annotated[str | None, typer.Argument(metavar="POLICY",
                                               help="Policy file or built-in name; default: "
                                                    "the built-in default policy.")] = None,
    output: FormatOption = PlainFormat.text, as_json: Json = False,
) -> None:
    """Print the effective policy as a file `policy check` accepts (source and digest as
    comments); save it as a start for your own (or write `extends: NAME` and your changes).

    The copy is named NAME-copy: its digest is its own, and an approval record under it must
    not read as one under NAME.

    Example: dflash-guard policy show strict --format json
    """
    output = chosen_format(output, as_json)
    policy = load_policy(file)
    if output is PlainFormat.json:
        print_json(policy.to_json())
    else:
        name = copy_name(policy.name)
        copy = dataclasses.replace(policy, document={**policy.document, "name": name})
        note = (f"# a copy of policy {policy.name!r} (source and digest below are the "
                f"original's), named {name!r}: a copy's digest is its own\n")
        stdout.out(note + copy.to_yaml(), end="", highlight=False)


def copy_name(name: str) -> str:
    """The name `policy show` gives a copy of policy `name`."""
    return name if name.endswith("-copy") else f"{name}-copy"


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.add_typer(policy_app, name="policy")
