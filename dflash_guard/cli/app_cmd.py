"""`dflash-guard verify-app IMAGE.dmg`: an Apple-signed disk image (oMLX's) verified offline
against the policy's team pin and, with `--lock`, the sha256 the lock pins for it
(`dflash_guard/trust/apple/`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish
from dflash_guard.cli.options import Format, Json, chosen_format
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.app import render_app


def verify_app(
    image: Annotated[Path, typer.Argument(metavar="IMAGE",
                                          help="The disk image, e.g. oMLX.dmg.")],
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="Policy whose engines.omlx pins the team (and optionally the identifier and "
             "roots trusted instead of Apple's): a built-in name or a file.")] = None,
    lock: Annotated[Path | None, typer.Option(
        "--lock", metavar="FILE",
        help="Lockfile pinning the image (lock --package omlx==VERSION@IMAGE): its sha256 "
             "must be the lock's.")] = None,
    fmt: Format = PlainFormat.text, as_json: Json = False,
) -> None:
    """Verify an Apple-signed disk image offline: its trailer, the code directory's hash over
    the image, the CMS signature, the chain to Apple's root through a Developer ID
    intermediate, and the policy's team; exit 0 verified, 1 not.

    Revocation and notarization are not checked offline (a stapled ticket is reported).

    Example: dflash-guard verify-app oMLX.dmg --policy ./prod.yaml --lock dflash.lock
    """
    from dflash_guard.pins.engine_pins import engine_package
    from dflash_guard.pins.lockfile import load_lockfile
    from dflash_guard.trust.apple.image import verify_image
    from dflash_guard.trust.policy import load_policy

    fmt = chosen_format(fmt, as_json)
    pins = load_policy(policy).omlx
    locked = None
    if lock is not None:
        package = engine_package(load_lockfile(lock), "omlx")
        locked = list(package.sha256) if package is not None else []
    finish(verify_image(image, pins, locked=locked), fmt, render_app)


def register(app: typer.Typer) -> None:
    """Add `verify-app` to `app`."""
    app.command("verify-app")(verify_app)
