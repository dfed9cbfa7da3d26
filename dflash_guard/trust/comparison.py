"""The GGUF comparison record: an in-toto Statement that an engine serving a GGUF decoded like the
safetensors target it was converted from (`difftest reference ... --record FILE`).

Subjects are the GGUF (`gguf/NAME`, one per split part llama.cpp loads with it) and every file
of the safetensors target (`target/PATH`), each with its sha256. The predicate holds the verdict
(hard divergences, near-ties), the prompt set's digest, the token budget, the engine's identity
(URL without credentials, served model) and the conversion record written by
`scripts/llamacpp.py` (converter source sha256, outtype, input and output digests), or null
when none was given.

A policy's `gguf_comparisons` may name such a record instead of a hand-written entry; the gate
accepts it only when `accepts` finds its subjects equal to the lock's files (every GGUF subject
a locked `.gguf` by digest; every target subject by path and digest), the verdict passed, and so
did its logprob check (`predicate.logprobs.passed`; fail closed on a record that has none). A
record counts for the locked `.gguf` files its GGUF subjects name by digest only
(`covered_gguf`): every locked `.gguf` needs a record that compared it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json, read_input_text, write_atomic
from dflash_guard.outcome import Outcome
from dflash_guard.pins.folder import list_folder
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.trust.intoto import Statement, Subject

# v2: snake_case predicate keys (v1 had camelCase ones).
PREDICATE_TYPE = "https://github.com/dflash-guard/dflash-guard/gguf-comparison/v2"
GGUF_PREFIX, TARGET_PREFIX = "gguf/", "target/"


def target_subjects(target_dir: Path) -> list[Subject]:
    """`target/PATH` subjects for every file of the target folder, listed with the one walk
    `lock` and `verify` use (hidden files included), so the record covers what a lock of the
    folder locks."""
    files, _ = list_folder(target_dir)
    return [Subject(TARGET_PREFIX + rel, {"sha256": sha256_file(path)})
            for rel, path in sorted(files.items())]


def read_conversion(path: Path, gguf_sha256: str) -> dict[str, Any]:
    """A conversion record (`scripts/llamacpp.py`) whose output is the GGUF with `gguf_sha256`."""
    record = read_input_json(path, "conversion record")
    output = record.get("output") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(output, dict) or (
        output.get("sha256") != gguf_sha256
    ):
        raise InputError(f"{path}: its output digest is not the GGUF's ({gguf_sha256[:12]}...): "
                         "the conversion record describes another file")
    return record


def comparison_statement(
    *,
    target_dir: Path,
    gguf: Path | None,
    summary: Mapping[str, Any],
    conversion: Mapping[str, Any] | None,
    time: dt.datetime | None = None,
) -> Statement:
    """The record of one engine-vs-reference diff (`summary`: the report's verdict fields)."""
    subjects = []
    if gguf is not None:  # with every split part llama.cpp loads with it
        from dflash_guard.pins.fileset import FileSetError, llamacpp_files

        try:
            parts = llamacpp_files(gguf).weights
        except FileSetError:  # no split llama.cpp reads: the record names the file alone
            parts = (gguf.name,)
        subjects += [Subject(GGUF_PREFIX + part, {"sha256": sha256_file(gguf.parent / part)})
                     for part in parts]
    subjects += target_subjects(target_dir)
    when = (time or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    predicate = {
        **summary,
        "compared_at": when.isoformat().replace("+00:00", "Z"),
        "tool": {"name": "dflash-guard", "version": __version__},
        "conversion": dict(conversion) if conversion is not None else None,
    }
    return Statement(tuple(subjects), PREDICATE_TYPE, predicate)


def write_comparison(statement: Statement, out: Path) -> None:
    """Write the record atomically (whole or not at all)."""
    try:
        write_atomic(out, statement.dumps())
    except OSError as error:
        raise InputError(f"cannot write comparison record {out}: {error}") from None


def read_comparison(path: Path) -> Statement:
    """Read a GGUF comparison record; `InputError` when it is missing or not one."""
    text = read_input_text(path, "GGUF comparison record")
    try:
        return Statement.loads(text, PREDICATE_TYPE, "a dflash-guard GGUF comparison")
    except ValueError as error:
        raise InputError(f"{path}: {error}") from None


def covered_gguf(statement: Statement, lock: Lockfile) -> tuple[str, ...]:
    """The locked `.gguf` files (paths in the gguf artifact) this record compared: those whose
    sha256 is one of its GGUF subjects' (the GGUF, and any split part loaded with it)."""
    gguf = lock.artifact("gguf")
    digests = {s.digest.get("sha256") for s in statement.subjects
               if s.name.startswith(GGUF_PREFIX)}
    if gguf is None:
        return ()
    return tuple(sorted(f.path for f in gguf.files
                        if f.path.endswith(".gguf") and f.sha256 in digests))


def accepts(statement: Statement, lock: Lockfile) -> Outcome:
    """Whether the record is about the lock's files: one GGUF subject equal to a locked `.gguf`
    file, every target subject equal to the locked target's file, a passed verdict and a passed
    logprob check (a record without one, from before logprobs were compared, is refused)."""
    gguf, target = lock.artifact("gguf"), lock.artifact("target")
    if gguf is None or target is None:
        return Outcome.refused("the lock has no gguf and target artifacts to compare")
    subjects = {s.name: s.digest.get("sha256") for s in statement.subjects}
    locked_gguf = {f.sha256 for f in gguf.files if f.path.endswith(".gguf")}
    named = [s for s in statement.subjects if s.name.startswith(GGUF_PREFIX)]
    if not named:
        return Outcome.refused("it names no GGUF")
    if stray := [s.name for s in named if s.digest.get("sha256") not in locked_gguf]:
        return Outcome.refused(f"its {stray[0]} is none of the locked gguf files: a record "
                               "counts only for the files it compared")
    targets = {name.removeprefix(TARGET_PREFIX): digest for name, digest in subjects.items()
               if name.startswith(TARGET_PREFIX)}
    if not targets:
        return Outcome.refused("it names no target files")
    for path, digest in sorted(targets.items()):
        locked = target.file(path)
        if locked is None or locked.sha256 != digest:
            return Outcome.refused(f"target/{path} differs from the locked target")
    if statement.predicate.get("passed") is not True:
        return Outcome.refused(f"its verdict is {statement.predicate.get('verdict')!r}")
    logprobs = statement.predicate.get("logprobs")
    if not isinstance(logprobs, dict):
        return Outcome.refused("it carries no logprob check (a record written before the diff "
                               "compared logprobs proves the greedy tokens only, not that the "
                               "engine served the locked model): compare again")
    if logprobs.get("passed") is not True:
        return Outcome.refused(f"its logprobs did not pass (largest difference "
                               f"{logprobs.get('max_delta')!r}, tolerance "
                               f"{logprobs.get('tolerance')!r})")
    return Outcome.passed(f"compared on {statement.predicate.get('prompts')} prompts: "
                          f"{statement.predicate.get('verdict')}")
