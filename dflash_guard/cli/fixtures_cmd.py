"""`dflash-guard fixtures make DIR`: write the built-in tiny target/drafter pair."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import stdout
from dflash_guard.errors import InputError


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    fixtures = typer.Typer(help="Built-in test fixtures.", no_args_is_help=True)

    @fixtures.command("make")
    def make(
        out_dir: Annotated[Path, typer.Argument(help="Folder to write target/ and drafter/ in.")],
        force: Annotated[bool, typer.Option(
            "--force", help="Delete and rewrite DIR/target and DIR/drafter if present.")] = False,
        dflash2: Annotated[bool, typer.Option(
            "--dflash2", help="Write a DFlash 2 drafter (the trained one plus seeded "
            "convolutions and candidate selector) as DIR/drafter.")] = False,
        head_dim: Annotated[int | None, typer.Option(
            "--head-dim", help="Zero-pad both models' attention heads to this size (64 or 256): "
            "the same function, for engines without head_dim-16 kernels (vLLM on CPU).")] = None,
    ) -> None:
        """Write the built-in tiny pair (byte-level tokenizer, trained, deterministic) to DIR.

        Writes DIR/target and DIR/drafter only; refuses to touch either if it exists, unless
        --force, which deletes and rewrites both (nothing else in DIR is touched).

        With --dflash2, DIR/drafter is a DFlash 2 drafter (deterministic too). With --head-dim 64
        both models' heads are zero-padded from 16 to 64 dims: the same logits (to float32
        rounding) and greedy tokens, served by engines that have no head_dim-16 kernels.

        Example: dflash-guard fixtures make demo-out
        """
        from kernels_ref.fixtures import TARGET_CONFIG, make_fixture_pair  # loads torch
        from kernels_ref.pad import padding_problem

        if head_dim is not None and (problem := padding_problem(TARGET_CONFIG["head_dim"],
                                                                head_dim)):
            raise InputError(f"--head-dim: {problem}")

        if out_dir.exists() and not out_dir.is_dir():
            raise InputError(f"{out_dir}: exists and is not a folder")
        try:
            target, drafter = make_fixture_pair(out_dir, force=force, dflash2=dflash2,
                                                head_dim=head_dim)
        except FileExistsError as exc:
            raise InputError(f"{exc.filename}: {exc.strerror}") from None
        except OSError as exc:
            raise InputError(f"{out_dir}: cannot write the fixture pair ({exc})") from None
        stdout.print(f"target:  {target}\ndrafter: {drafter}", highlight=False)

    app.add_typer(fixtures, name="fixtures")
