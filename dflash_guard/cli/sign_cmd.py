"""`dflash-guard sign LOCK [--key KEY]`: sign a lockfile with Sigstore (keyless) or a key."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import stderr
from dflash_guard.cli.options import PassphraseEnv, key_passphrase
from dflash_guard.trust.signing import sign_keyless, sign_with_key


def sign(
    lock: Annotated[Path, typer.Argument(metavar="LOCK",
                                         help="The lockfile to sign (e.g. dflash.lock).")],
    key: Annotated[Path | None, typer.Option(
        "--key", metavar="PEM",
        help="ECDSA private key (PEM, encrypted or not) for offline signing: writes LOCK.sig.")
    ] = None,
    passphrase_env: PassphraseEnv = "COSIGN_PASSWORD",
    interactive: Annotated[bool | None, typer.Option(
        "--interactive/--no-interactive",
        help="Allow the browser sign-in when no ambient CI credential exists (default: when "
             "stdin is a terminal).")
    ] = None,
) -> None:
    """Sign LOCK: keyless with Sigstore (writes LOCK.sigstore.json) or with --key (LOCK.sig).

    Either is a Sigstore bundle holding a DSSE in-toto attestation: its payload is LOCK itself
    when LOCK is an in-toto Statement (an approval record), else a statement naming LOCK's
    sha256 (`cosign verify-blob-attestation` reads both).

    Example: dflash-guard sign dflash.lock --key signing-key.pem
    """
    if key is not None:
        out = sign_with_key(lock, key, passphrase=key_passphrase(passphrase_env))
    else:
        allow_browser = sys.stdin.isatty() if interactive is None else interactive
        out = sign_keyless(lock, interactive=allow_browser)
    stderr.print(f"signed {lock} -> {out}", highlight=False, soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.command("sign")(sign)
