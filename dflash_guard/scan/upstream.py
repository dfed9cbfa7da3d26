"""A model folder's meaning files held against its upstream (`rules.UPSTREAM_DIFF`,
`rules.UPSTREAM_NONE`).

The files that decide what the engine reads and writes without any code
(`pins.lockfile.UPSTREAM_FILES`: the tokenizer's files, the generation defaults, the chat
templates) are compared with the model's upstream:
- the upstream the policy names for the folder's role (`upstream:` in the policy, locked beside
  the deploy as `ROLE-upstream`), when there is one: a loaded file that differs from the
  upstream's (in the values the engine reads: canonical JSON for `.json` files, bytes for the
  others), or that the upstream does not ship, is HIGH, with the differences spelled out; a
  compared file the upstream ships and the folder does not is MEDIUM (a default is gone);
- else the catalog of published files the tool ships (`upstream_known.json`): a tokenizer file
  in none of them has no upstream at all, MEDIUM (generation configs and chat templates have
  catalogs of their own: `generation`, `templates`).
The tokenizer file `fast_tokenizer_files` selects is compared too, under its own name.
A file whose sha256 is on the policy's `reviewed_files` is quiet either way.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
from collections.abc import Collection
from functools import cache
from pathlib import Path

from dflash_guard import fileio, rules
from dflash_guard.findings import Finding
from dflash_guard.pins.fileset import FileSetError, loaded_tokenizer_file
from dflash_guard.pins.lockfile import UPSTREAM_FILES
from dflash_guard.scan.generation import REVIEWED, canonical_sha256
from dflash_guard.severity import Severity

DETECTOR = "upstream"
# files judged by catalogs of their own without an upstream (`generation`, `templates`)
OWN_CATALOGS = frozenset({"generation_config.json", "chat_template.jinja", "chat_template.json"})
KNOWN = Path(__file__).with_name("upstream_known.json")
SHOWN = 6  # differences spelled out per file


@cache
def known_files() -> dict[str, dict[str, str]]:
    """The catalog: digest -> {name, file, source} of each published tokenizer file, keyed by
    the sha256 of its canonical JSON (`.json` files whose text is known) or of its bytes (a
    file known by the Hub's LFS digest, or not JSON)."""
    catalog: dict[str, dict[str, str]] = json.loads(KNOWN.read_text(encoding="utf-8"))
    return catalog


class _Read:
    """One compared file: its bytes' sha256, the digest the catalog keys it by, and its parsed
    JSON (None for other files, or JSON that does not parse: the scan reports that)."""

    def __init__(self, path: Path) -> None:
        self.data = fileio.read_regular(path, fileio.MAX_TEXT_BYTES)
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.document: object = None
        self.parsed = False
        if path.suffix == ".json":
            with contextlib.suppress(ValueError):
                self.document, self.parsed = fileio.loads_json(self.data, strict=True), True
        self.digest = canonical_sha256(self.document) if self.parsed else self.sha256


def differences(ours: object, theirs: object, where: str = "") -> list[str]:
    """Each place two parsed JSON documents differ, as `PATH: OURS (upstream THEIRS)`, in
    document order; a member one side lacks shows as `absent`."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in [*ours, *(k for k in theirs if k not in ours)]:
            inner = f"{where}.{key}" if where else str(key)
            if key not in theirs or key not in ours:
                found.append(f"{inner}: {_shown(ours.get(key), key in ours)} (upstream "
                             f"{_shown(theirs.get(key), key in theirs)})")
            else:
                found += differences(ours[key], theirs[key], inner)
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [line for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                for line in differences(a, b, f"{where}[{i}]")]
    if ours == theirs and type(ours) is type(theirs):
        return []
    return [f"{where or '(document)'}: {_shown(ours)} (upstream {_shown(theirs)})"]


def _shown(value: object, present: bool = True) -> str:
    if not present:
        return "absent"
    if isinstance(value, list) and len(value) > 8:
        return f"a list of {len(value):,}"
    if isinstance(value, dict) and len(value) > 8:
        return f"an object of {len(value):,} members"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _text_differences(ours: bytes, theirs: bytes) -> list[str]:
    """The changed lines of two texts (a unified diff without its headers), or a note on two
    files that are not text."""
    try:
        a, b = ours.decode("utf-8").splitlines(), theirs.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return [f"binary: {len(ours):,} bytes (upstream {len(theirs):,})"]
    return [line[:100] for line in difflib.unified_diff(b, a, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _diff_message(ours: _Read, theirs: _Read) -> str:
    if ours.parsed and theirs.parsed:
        found = differences(ours.document, theirs.document)
    else:
        found = _text_differences(ours.data, theirs.data)
    shown = "; ".join(found[:SHOWN]) + (f"; and {len(found) - SHOWN} more" if len(found) > SHOWN
                                         else "")
    return f"{len(found)} difference(s): {shown}" if found else "the bytes differ"


def _compared(folder: Path) -> list[str]:
    """The files of `folder` held against an upstream: `UPSTREAM_FILES`, and the tokenizer
    file `fast_tokenizer_files` makes transformers load instead of `tokenizer.json`."""
    try:
        chosen = loaded_tokenizer_file(folder)
    except FileSetError:  # transformers fails on the folder: the fileset check says so
        chosen = "tokenizer.json"
    return [*UPSTREAM_FILES, *([chosen] if chosen not in UPSTREAM_FILES else [])]


def upstream_findings(folder: Path, prefix: str, loaded: Collection[str],
                      upstream: Path | None, reviewed: frozenset[str]) -> list[Finding]:
    """`rules.UPSTREAM_DIFF` and `rules.UPSTREAM_NONE` for the top-level compared files of
    `folder` that an engine of the deploy loads (`loaded`, relative paths), against the folder
    `upstream` (the policy's, verified) or, with none, the catalog; `prefix` is how the scan
    shows the folder's files (`target/`). A file that cannot be read is the scan's to report."""
    findings, loaded = [], frozenset(loaded)
    for name in _compared(folder):
        path = folder / name
        # only an upstream's UPSTREAM_FILES are locked (and verified): no other file of its
        # folder is a reference
        upstream_path = (upstream / name if upstream is not None and name in UPSTREAM_FILES
                         else None)
        shown = prefix + name
        if name not in loaded or not path.is_file():
            # missed only where an engine loads the folder as a Hugging Face model
            if (upstream_path is not None and upstream_path.is_file() and not path.exists()
                    and "config.json" in loaded):
                findings.append(Finding.of(
                    rules.UPSTREAM_DIFF, shown,
                    f"the upstream ships {name} and this folder does not: the engine falls back "
                    "to its defaults where the upstream set them", severity=Severity.medium,
                    detector=DETECTOR))
            continue
        try:
            ours = _Read(path)
            theirs = (_Read(upstream_path) if upstream_path is not None
                      and upstream_path.is_file() else None)
        except (OSError, ValueError):
            continue
        if ours.sha256 in reviewed:
            continue
        clear = f"(sha256 {ours.sha256}: once read, {REVIEWED})"
        if upstream is not None and theirs is None:
            findings.append(Finding.of(
                rules.UPSTREAM_DIFF, shown,
                f"the upstream ships no {name}, and the engine loads this one {clear}",
                detector=DETECTOR))
        elif theirs is not None and ours.digest != theirs.digest:
            findings.append(Finding.of(
                rules.UPSTREAM_DIFF, shown,
                f"differs from the upstream's: {_diff_message(ours, theirs)} {clear}",
                detector=DETECTOR))
        elif upstream is None and name not in OWN_CATALOGS and not known_files().keys() & {
                ours.digest, ours.sha256}:
            findings.append(Finding.of(
                rules.UPSTREAM_NONE, shown,
                f"no upstream vouches for it: not a published file of the catalog, and no "
                f"upstream is named for this model (the policy's `upstream:`, scan's "
                f"--upstream) {clear}",
                detector=DETECTOR))
    return findings
