"""`dflash-guard verify`: compare what is on disk with the lockfile, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dflash_guard.cli.common import OutputFormat, print_json, stderr, stdout
from dflash_guard.errors import EXIT_FINDING, InputError
from dflash_guard.formats.terminal import markup_safe, terminal_safe
from dflash_guard.pins.lockfile import ROLES, load_lockfile
from dflash_guard.pins.verify import VerifyReport, verify_lock
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.signing import SignatureCheck, verify_signatures

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Hashing less than this is quick: no progress bar for it.
PROGRESS_MIN_BYTES = 256 * 1024 * 1024


class HashingBar:
    """The progress callback `verify_lock` calls: a transient rich bar on stderr for folders of
    at least `PROGRESS_MIN_BYTES`, drawn while one folder is hashed and removed when it is done."""

    def __init__(self) -> None:
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if done or total < PROGRESS_MIN_BYTES:
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            self._bar = Progress("[progress.description]{task.description}", BarColumn(),
                                 DownloadColumn(), TransferSpeedColumn(), console=stderr,
                                 transient=True)
            self._task = self._bar.add_task("hashing", total=total)
            self._bar.start()
        assert self._task is not None
        self._bar.update(self._task, completed=done)
        if done >= total:
            self._bar.stop()
            self._bar = None


def parse_roots(specs: list[str]) -> dict[str, Path]:
    """`ROLE=DIR` options -> {role: Path}."""
    roots: dict[str, Path] = {}
    for spec in specs:
        role, sep, folder = spec.partition("=")
        if not sep or role not in ROLES or not folder:
            raise InputError(
                f"--root {spec!r}: expected ROLE=DIR with ROLE one of {', '.join(ROLES)}"
            )
        if role in roots:
            raise InputError(f"--root {role}: given twice")
        roots[role] = Path(folder).expanduser()
    return roots


def render(report: VerifyReport) -> None:
    """The text report: one line per role, then a table of the files that differ."""
    for role, folder in sorted(report.locations.items()):
        stdout.print(f"{role:8} {terminal_safe(str(folder))}", highlight=False, markup=False)
    if report.ok:
        stdout.print(
            f"[green]OK[/]: {report.files_checked} files match the lockfile "
            f"({report.cache_hits} from the stat cache)"
        )
        return
    table = Table(title="files that differ from the lockfile")
    for column in ("role", "path", "problem", "expected", "actual"):
        table.add_column(column, overflow="fold")
    for p in report.problems:
        cells = (p.role, p.path, p.kind, p.expected, p.actual)
        table.add_row(*(markup_safe(cell or "") for cell in cells))
    stdout.print(table)
    stdout.print(f"[red]MISMATCH[/]: {len(report.problems)} problem(s)")


def render_signatures(checks: list[SignatureCheck]) -> None:
    """One line per signature checked: who signed it, or why it was refused."""
    for check in checks:
        what = markup_safe(f"{check.subject} ({Path(check.signature).name})")
        if check.ok:
            stdout.print(f"[green]signed[/]: {what} by {markup_safe(str(check.signer))}",
                         highlight=False, soft_wrap=True)
        else:
            stdout.print(f"[red]BAD SIGNATURE[/]: {what}: {markup_safe(str(check.reason))}",
                         highlight=False, soft_wrap=True)


def verify(
    lock_path: Annotated[Path, typer.Option("--lock", help="Lockfile to check against.")] = Path(
        "dflash.lock"
    ),
    root: Annotated[
        list[str] | None, typer.Option("--root", help="ROLE=DIR: where that artifact lives.")
    ] = None,
    download: Annotated[
        bool, typer.Option("--download", help="Fetch missing artifacts at the pinned SHA.")
    ] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Ignore the stat cache; hash everything.")
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Policy naming the accepted signers (default: built-in)."),
    ] = None,
    trust_root: Annotated[
        Path | None,
        typer.Option("--trust-root", help="Sigstore trusted root (JSON): verify offline."),
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="text or json.")
    ] = OutputFormat.text,
) -> None:
    """Check every locked file on disk: missing, extra, size and sha256 (exit 1 on any mismatch).

    Example: dflash-guard verify --lock dflash.lock --root target=models/target --policy strict
    """
    lockfile = load_lockfile(lock_path)
    accepted = load_policy(policy)  # a bad policy fails before any hashing
    report = verify_lock(
        lockfile,
        parse_roots(root or []),
        download=download,
        use_cache=not no_cache,
        on_progress=HashingBar() if stderr.is_terminal else None,
    )
    # Signatures: the lockfile's when one exists or the policy requires it; each model.sig.
    signatures = verify_signatures(lock_path, lockfile, report.locations, accepted,
                                   trust_root=trust_root)
    if fmt is OutputFormat.json:
        print_json({"lockfile": str(lock_path), "digest": lockfile.digest(), **report.to_json(),
                    "signatures": [check.to_json() for check in signatures]})
    else:
        render(report)
        render_signatures(signatures)
    if not report.ok or not all(check.ok for check in signatures):
        raise typer.Exit(EXIT_FINDING)


def register(app: typer.Typer) -> None:
    """Add `verify` to `app`."""
    app.command("verify")(verify)
