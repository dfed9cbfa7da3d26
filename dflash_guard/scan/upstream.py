"""A model folder's meaning files held against its upstream (`rules.UPSTREAM_DIFF`,
`rules.UPSTREAM_NONE`).

The files that decide what the engine reads and writes without any code
(`pins.lockfile.UPSTREAM_FILES`: the tokenizer's files, the generation defaults, the chat
templates) are compared with the model's upstream:
- the upstream the policy names for the folder's role (`upstream:` in the policy, locked beside
  the deploy as `ROLE-upstream`), when there is one: a loaded file that differs from the
  upstream's (in the values the engine reads: canonical JSON for `.json` files, bytes for the
  others), or that the upstream does not ship, is HIGH, with the differences spelled out; a
  compared file the upstream ships and the folder does not is MEDIUM (a default is gone), HIGH
  where the engine then reads what it decides from a file not compared (`FALLBACK`);
- else the catalog of published files the tool ships (`upstream_known.json`): a tokenizer file
  in none of them (under its own name), or files published by no one model together, have no
  upstream at all, MEDIUM (generation configs and chat templates have catalogs of their own:
  `generation`, `templates`).
The tokenizer file `fast_tokenizer_files` selects is compared too, under its own name, and so
are the named chat templates (`additional_chat_templates/*.jinja`). A loaded file that cannot
be read, or parses to JSON without a canonical form (a lone surrogate), is not quiet.
A GGUF that llama.cpp loads is held against the upstream's `tokenizer.json` as the pinned
tree's `convert_hf_to_gguf.py` writes it (`gguf_findings`): each token's text, the CONTROL type
of special tokens, the merges and the end-of-generation id.
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
from typing import Any

from dflash_guard import fileio, rules
from dflash_guard.errors import InputError
from dflash_guard.findings import Finding
from dflash_guard.pins.fileset import FileSetError, loaded_tokenizer_file
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import UPSTREAM_FILES, UPSTREAM_TEMPLATE_DIR, is_upstream_file
from dflash_guard.scan import tokens
from dflash_guard.scan.generation import REVIEWED, canonical_sha256
from dflash_guard.scan.weights import gguf_tokens
from dflash_guard.severity import Severity
from kernels_ref.gguf_reader import GGUF, read_gguf

DETECTOR = "upstream"
# files judged by catalogs of their own without an upstream (`generation`, `templates`)
OWN_CATALOGS = frozenset({"generation_config.json", "chat_template.jinja", "chat_template.json",
                          "processor_config.json"})
KNOWN = Path(__file__).with_name("upstream_known.json")
SHOWN = 6  # differences spelled out per file
NORMAL, UNUSED = 1, 5  # llama_token_type (CONTROL: gguf_tokens.CONTROL)
# compared files whose absence hands what they decide to a file that is not compared (HIGH)
FALLBACK = {
    # vllm 0.32 `transformers_utils/config.py` `try_get_generation_config`: without one,
    # `GenerationConfig.from_model_config(config)` takes eos_token_id (stop ids) from config.json
    "generation_config.json": "vLLM then builds the generation defaults (its stop ids among them) "
                              "from config.json, which is not held against the upstream",
}


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
        self.digest = self.sha256
        if path.suffix == ".json":
            # a lone surrogate (`"\ud800"`) parses, and Python's transformers reads it, but has
            # no canonical UTF-8: such a file is compared by its bytes (UnicodeEncodeError)
            with contextlib.suppress(ValueError):
                document = fileio.loads_json(self.data, strict=True)
                self.digest, self.document, self.parsed = (canonical_sha256(document),
                                                           document, True)


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
    return _listed(found) if found else "the bytes differ"


def _listed(found: list[str]) -> str:
    """`N difference(s): ` and the first `SHOWN` of them, the rest counted."""
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return f"{len(found)} difference(s): {'; '.join(found[:SHOWN])}{more}"


def _upstream_vocabulary(tokenizer: dict[str, Any]) -> tuple[dict[int, str], set[int], set[int]]:
    """A parsed `tokenizer.json`'s `id -> text` (the model's vocabulary, then its added tokens),
    and the ids of its added tokens and of those marked special."""
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    texts: dict[int, str] = {}
    if isinstance(vocab, dict):
        texts = {value: text for text, value in vocab.items()
                 if isinstance(value, int) and not isinstance(value, bool)}
    elif isinstance(vocab, list):  # Unigram: [piece, score] by id
        texts = {i: entry[0] for i, entry in enumerate(vocab)
                 if isinstance(entry, list) and entry and isinstance(entry[0], str)}
    added, special = set(), set()
    for entry in tokenizer.get("added_tokens") or []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), int) and isinstance(
                entry.get("content"), str):
            texts[entry["id"]] = entry["content"]
            added.add(entry["id"])
            if entry.get("special") is True:
                special.add(entry["id"])
    return texts, added, special


def _merges(tokenizer: dict[str, Any]) -> list[bytes]:
    """A parsed `tokenizer.json`'s BPE merges as the GGUF writes them (`a b`, UTF-8)."""
    model = tokenizer.get("model")
    merges = model.get("merges") if isinstance(model, dict) else None
    return [(merge if isinstance(merge, str) else " ".join(map(str, merge))).encode(
        "utf-8", "surrogatepass") for merge in (merges if isinstance(merges, list) else [])]


def _end_ids(upstream: Path) -> set[int]:
    """The upstream's end-of-generation ids: `generation_config.json`'s `eos_token_id`."""
    config = tokens.read_json(upstream / "generation_config.json")
    return set(tokens.int_ids(config.get("eos_token_id")))


def _between(merge: bytes, marked: set[bytes]) -> bool:
    """Whether the merge `a b` joins two of the `marked` tokens (at any of its spaces)."""
    return any(merge[:i] in marked and merge[i + 1:] in marked
               for i, byte in enumerate(merge) if byte == 0x20)


def gguf_differences(gguf: GGUF, tokenizer: dict[str, Any], end_ids: set[int]) -> list[str]:
    """How the vocabulary llama.cpp reads from `gguf` differs from the upstream's parsed
    `tokenizer.json` as `convert_hf_to_gguf.py` (`get_vocab_base`) writes it: each id's text
    (ids past the upstream's vocabulary only as the converter's `[PADn]` UNUSED padding), a
    CONTROL type on an ordinary upstream token or an upstream special token the GGUF leaves
    NORMAL, the merges in order (but for a merge of two special tokens, which never applies),
    and an end-of-generation id (`tokenizer.ggml.eos_token_id`)
    that is none of the upstream's (`end_ids`, when it has any)."""
    texts, added, special = _upstream_vocabulary(tokenizer)
    types = gguf_tokens.int32s(gguf, "tokenizer.ggml.token_type")
    found, count = [], 0
    for token, raw in enumerate(gguf_tokens.strings(gguf, gguf_tokens.TOKENS)):
        count += 1
        text, theirs = raw.decode("utf-8", "replace"), texts.get(token)
        kind = types[token] if token < len(types) else None
        if theirs is None:
            if kind != UNUSED:
                found.append(f"token {token} {text!r} (upstream none)")
        elif text != theirs:
            found.append(f"token {token} {text!r} (upstream {theirs!r})")
        elif kind == gguf_tokens.CONTROL and token not in added:
            found.append(f"token {token} {text!r} is CONTROL, which llama.cpp never writes "
                         "into an answer (upstream an ordinary token)")
        elif kind == NORMAL and token in special:
            found.append(f"token {token} {text!r} is NORMAL (upstream special)")
    missing = sorted(token for token in texts if token >= count)
    if missing:
        found.append(f"{len(missing)} upstream token(s) past the GGUF's {count:,}, from id "
                     f"{missing[0]}")
    # a merge of two special tokens never applies (they are split out before BPE): what a
    # converter adds where the upstream has no merges, since llama.cpp refuses BPE without any
    marked = {texts[token].encode("utf-8", "surrogatepass") for token in special}
    ours = [merge for merge in gguf_tokens.strings(gguf, "tokenizer.ggml.merges")
            if not _between(merge, marked)]
    theirs_merges = _merges(tokenizer)
    if ours != theirs_merges:
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs_merges, strict=False))
                      if a != b), min(len(ours), len(theirs_merges)))
        found.append(f"merges: {len(ours):,} (upstream {len(theirs_merges):,}), first "
                     f"different at {first}")
    end = gguf_tokens.number(gguf, "tokenizer.ggml.eos_token_id")
    if end is not None and end_ids and end not in end_ids:
        found.append(f"tokenizer.ggml.eos_token_id {end} (upstream {sorted(end_ids)})")
    return found


def gguf_findings(path: Path, display: str, upstream: Path,
                  reviewed: frozenset[str]) -> list[Finding]:
    """`rules.UPSTREAM_DIFF` for a GGUF llama.cpp loads, against the upstream folder's
    `tokenizer.json` (`gguf_differences`); a header the scan refuses is its to report."""
    try:
        tokenizer = fileio.read_json(upstream / "tokenizer.json", limit=fileio.MAX_TEXT_BYTES)
    except (OSError, ValueError) as error:  # fail closed: nothing to hold the GGUF against
        return [Finding.of(rules.UPSTREAM_DIFF, display,
                           "the GGUF's vocabulary cannot be held against the upstream's "
                           f"tokenizer.json: {error}", severity=Severity.medium,
                           detector=DETECTOR)]
    try:
        with fileio.open_binary(path) as handle, read_gguf(handle) as gguf:
            found = gguf_differences(gguf, tokenizer if isinstance(tokenizer, dict) else {},
                                     _end_ids(upstream))
    except (OSError, ValueError):  # a header the scan refuses: it reports that
        return []
    if not found:
        return []
    try:
        digest = sha256_file(path)
    except InputError as error:  # changed under the scan
        digest = f"unknown: {error}"
    if digest in reviewed:
        return []
    return [Finding.of(rules.UPSTREAM_DIFF, display,
                       f"its vocabulary differs from the upstream's tokenizer.json as llama.cpp "
                       f"reads it: {_listed(found)} (sha256 {digest}: once read, {REVIEWED})",
                       detector=DETECTOR)]


def _own_catalog(name: str) -> bool:
    """Whether the file is judged by a catalog of its own without an upstream (`OWN_CATALOGS`,
    the named chat templates: `templates`)."""
    return name in OWN_CATALOGS or name.startswith(f"{UPSTREAM_TEMPLATE_DIR}/")


def _templates(folder: Path | None) -> list[str]:
    """The named chat templates transformers loads from `folder` (`additional_chat_templates/
    *.jinja`, its `Path.glob`)."""
    found = folder / UPSTREAM_TEMPLATE_DIR if folder is not None else None
    if found is None or not found.is_dir():
        return []
    return sorted(f"{UPSTREAM_TEMPLATE_DIR}/{p.name}" for p in found.glob("*.jinja"))


def _compared(folder: Path, upstream: Path | None) -> list[str]:
    """The files of `folder` held against an upstream: `UPSTREAM_FILES`, the named chat
    templates of either folder, and the tokenizer file `fast_tokenizer_files` makes
    transformers load instead of `tokenizer.json`."""
    try:
        chosen = loaded_tokenizer_file(folder)
    except FileSetError:  # transformers fails on the folder: the fileset check says so
        chosen = "tokenizer.json"
    named = sorted({*_templates(folder), *_templates(upstream)})
    return [*UPSTREAM_FILES, *([chosen] if chosen not in UPSTREAM_FILES else []), *named]


def upstream_findings(folder: Path, prefix: str, loaded: Collection[str],
                      upstream: Path | None, reviewed: frozenset[str]) -> list[Finding]:
    """`rules.UPSTREAM_DIFF` and `rules.UPSTREAM_NONE` for the top-level compared files of
    `folder` that an engine of the deploy loads (`loaded`, relative paths), against the folder
    `upstream` (the policy's, verified) or, with none, the catalog; `prefix` is how the scan
    shows the folder's files (`target/`). A loaded file that cannot be read or compared is a
    finding too (fail closed)."""
    findings, loaded = [], frozenset(loaded)
    vouched: dict[str, frozenset[str]] = {}  # shown -> the models that publish the file
    for name in _compared(folder, upstream):
        path = folder / name
        # only an upstream's files of these names are locked (and verified, an unlocked one
        # refused): no other file of its folder is a reference
        upstream_path = (upstream / name if upstream is not None and is_upstream_file(name)
                         else None)
        shown = prefix + name
        if name not in loaded or not path.is_file():
            # missed only where an engine loads the folder as a Hugging Face model
            if (upstream_path is not None and upstream_path.is_file()
                    and "config.json" in loaded):
                findings.append(Finding.of(
                    rules.UPSTREAM_DIFF, shown,
                    f"the upstream ships {name} and the engine loads none from this folder: "
                    + FALLBACK.get(name, "it falls back to its defaults where the upstream "
                                         "set them"),
                    severity=Severity.high if name in FALLBACK else Severity.medium,
                    detector=DETECTOR))
            continue
        try:
            ours = _Read(path)
            theirs = (_Read(upstream_path) if upstream_path is not None
                      and upstream_path.is_file() else None)
        except (OSError, ValueError) as error:  # fail closed: an engine may read what we cannot
            if upstream is not None or not _own_catalog(name):
                findings.append(Finding.of(
                    rules.UPSTREAM_DIFF if upstream is not None else rules.UPSTREAM_NONE, shown,
                    f"cannot be compared with {'the upstream' if upstream else 'the catalog'}"
                    f"'s: {error}", detector=DETECTOR))
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
        elif upstream is None and not _own_catalog(name):
            if (models := _published_as(ours, name)) is not None:
                vouched[shown] = models
                continue
            findings.append(Finding.of(
                rules.UPSTREAM_NONE, shown,
                f"no upstream vouches for it: not a published file of the catalog, and no "
                f"upstream is named for this model (the policy's `upstream:`, scan's "
                f"--upstream) {clear}",
                detector=DETECTOR))
    if vouched and not frozenset.intersection(*vouched.values()):
        # each file is some model's, but no model ships them together
        findings.append(Finding.of(
            rules.UPSTREAM_NONE, next(iter(vouched)),
            "no upstream vouches for these files together: they are published files of "
            "different models (" + "; ".join(f"{shown}: {', '.join(sorted(models))}"
                                             for shown, models in vouched.items())
            + "), and no upstream is named for this model", detector=DETECTOR))
    return findings


def _published_as(read: _Read, name: str) -> frozenset[str] | None:
    """The models whose published file `name` (the one `fast_tokenizer_files` selects stands
    for tokenizer.json) is `read`, by the catalog; None when it is none's."""
    entry = known_files().get(read.digest) or known_files().get(read.sha256)
    kind = name if name in UPSTREAM_FILES else "tokenizer.json"
    if entry is None or entry["file"] != kind:
        return None
    return frozenset(model.strip() for model in entry["name"].split(","))
