"""The regexes of a `tokenizer.json`, compiled and run by the real `tokenizers` library in a child
process with a deadline and a memory cap, never in the scan's own process.

The Rust tokenizers compile every `{"Regex": ...}` pattern (normalizer and decoder `Replace`,
pre-tokenizer `Split`, nested in `Sequence`s) when the file is loaded, and run them on every
request: a pattern with catastrophic backtracking makes Oniguruma give up (the library panics,
the request fails) or spin for minutes, and a huge one exhausts memory at load. The child loads
the file itself (`Tokenizer.from_file`), then runs each pattern alone as a `Split` over probe
strings built from the pattern's own characters and the usual character classes, repeated
`PROBE_CHARS` times with a non-matching tail. A panic, a crash, the memory cap or the deadline
is a finding. The probes are a bounded search, not a proof: a pattern slow only on an input no
probe resembles passes (docs/scan-boundary.md).

The same child then encodes and decodes ordinary text (`ROUND_TRIP`: the built-in prompts and a
few lines of code, whitespace, accents, CJK and emoji) with the loaded tokenizer: a normalizer,
pre-tokenizer, model or decoder that gives back other text than it was given rewrites every
prompt the model reads or every answer the user gets, without code (DG-TOKENIZER-REWRITE).
Byte-level and byte-fallback tokenizers give every such text back exactly (the real Qwen3 and
Llama 3 ones in the tests); a text holding the unknown token is not judged, and no probe starts
with whitespace (SentencePiece decoders strip the prefix space they add).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from dflash_guard import rules
from dflash_guard.errors import shorten
from dflash_guard.fileio import read_json
from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.severity import Severity
from kernels_ref.prompts import DEFAULT_PROMPTS, read_prompt_set

DETECTOR = "tokenizer"
MAX_SECONDS = 30.0  # the child's whole run: load, compile, every probe
MAX_MEMORY = 4 << 30  # address space of the child (Rust reserves thread stacks up front)
PROBE_CHARS = 1024
MAX_PATTERNS = 256
ROUND_TRIP = (
    "The quick brown fox jumps over the lazy dog. 1234567890 + 3.14 = ?",
    "def area(r):\n\treturn 3.14159 * r ** 2  # circle\n\nprint(area(2.0))\r\n",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9, \u00fcber Stra\u00dfe; \u4e2d\u6587\u6d4b\u8bd5 "
    "\u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \U0001F600\U0001F680",
    "yes, no; YES/NO: true != false  (brackets) [list] {dict} <tag> | pipes |",
)

_CHILD = r"""
import json, resource, sys

path, patterns, texts, unk, length, memory = json.loads(sys.stdin.read())
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))  # before the library allocates
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

def say(*parts):
    print(json.dumps(parts), flush=True)
try:
    tokenizer = Tokenizer.from_file(path)
except BaseException as error:  # a PanicException is a BaseException
    say("load", -1, f"{type(error).__name__}: {error}"[:300])
    sys.exit(0)
say("loaded")
classes = "aA1 \t\n\r_-'!.,\u00e9\u4e2d\U0001F600\u0300"
for index, pattern in enumerate(patterns):
    say("pattern", index)
    try:
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    except BaseException as error:
        say("compile", index, f"{type(error).__name__}: {error}"[:300])
        continue
    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = split
    own = sorted({c for c in pattern if c.isprintable()} - set(classes))[:64]
    units = list(classes) + own
    units += [a + b for a in classes[:8] for b in classes[:8] if a != b]
    for unit in units:
        body = (unit * length)[:length]
        for tail in ("", "!", "\x00", "a", " ", "\n"):
            try:
                tok.encode(body + tail)
            except BaseException as error:
                say("match", index, f"{type(error).__name__}: {error}"[:300], repr(unit))
                break
say("pattern", len(patterns))  # the round trip runs the whole pipeline, its regexes too
unknown = tokenizer.token_to_id(unk) if isinstance(unk, str) else None
for text in texts:
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    back = tokenizer.decode(ids, skip_special_tokens=False)
    if unknown not in ids and back != text:
        say("rewrite", -1, text, back)
        break
say("done")
"""


@functools.cache
def round_trip_texts() -> tuple[str, ...]:
    """The ordinary texts a tokenizer must give back: the built-in prompts, then `ROUND_TRIP`
    (read once per process: every tokenizer file of every scan sends them)."""
    prompts = [spec.prompt for spec in read_prompt_set(DEFAULT_PROMPTS)]
    return tuple(text.lstrip() for text in [*prompts, *ROUND_TRIP]
                 if isinstance(text, str) and text.strip())


def patterns(document: object) -> list[str]:
    """Every `{"Regex": pattern}` anywhere in a parsed tokenizer.json (iterative walk)."""
    found: list[str] = []
    pending = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            regex = node.get("Regex")
            if isinstance(regex, str) and len(node) == 1:
                found.append(regex)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found


def is_tokenizer(name: str, document: object) -> bool:
    """Whether a JSON file is one the tokenizers library loads: named `tokenizer.json`, or
    shaped like one (a `model` and a normalizer or pre-tokenizer), since a config can point
    a loader at any file name (`tokenizer_file`)."""
    return name == "tokenizer.json" or isinstance(document, dict) and "model" in document and (
        "pre_tokenizer" in document or "normalizer" in document)


def check_tokenizer_json(path: Path, display: str) -> list[Finding]:
    """Findings for one tokenizer file, its regexes and its round trip of ordinary text (none
    when it is not a tokenizer; a file that is not JSON is reported by the format allowlist)."""
    try:
        document = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    if not is_tokenizer(path.name, document):
        return []
    found = patterns(document)

    def finding(message: str, severity: Severity = Severity.high,
                rule: Rule = rules.TOKENIZER_REGEX) -> list[Finding]:
        return [Finding.of(rule, display, message, severity=severity, detector=DETECTOR)]

    if len(found) > MAX_PATTERNS:
        return finding(f"{len(found)} regexes, over the {MAX_PATTERNS} the check runs")
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1",
           "RUST_BACKTRACE": "0"}
    model = document.get("model") if isinstance(document, dict) else None
    unknown = model.get("unk_token") if isinstance(model, dict) else None
    request = json.dumps([str(path.resolve()), found, round_trip_texts(), unknown, PROBE_CHARS,
                          MAX_MEMORY])
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=request.encode(),
                              capture_output=True, timeout=MAX_SECONDS, env=env, check=False)
        output, timed_out, code = done.stdout, False, done.returncode
    except subprocess.TimeoutExpired as expired:
        output, timed_out, code = expired.stdout or b"", True, None
    events = [json.loads(line) for line in output.decode("utf-8", "replace").splitlines()
              if line.startswith("[")]
    current = next((e[1] for e in reversed(events) if e[0] == "pattern"), None)

    def shown(index: int | None) -> str:
        if index is None:
            return "loading the file"
        if index == len(found):
            return "the round trip of ordinary text"
        return f"regex {found[index][:80]!r}"

    problems: list[Finding] = []
    for event in events:
        if event[0] == "load":
            return finding(f"the tokenizers library refuses it: {event[2]}", Severity.medium)
        if event[0] == "rewrite":
            problems += finding(f"the tokenizers library gives {shorten(event[3])} back for "
                                f"{shorten(event[2])}: its pipeline rewrites ordinary text",
                                rule=rules.TOKENIZER_REWRITE)
        if event[0] in ("compile", "match"):
            where = "compiling" if event[0] == "compile" else f"matching {event[3]} repeated"
            problems += finding(f"{shown(event[1])}: the tokenizers library fails {where} "
                                f"({event[2]}); a request that meets it fails or hangs")
    if timed_out:
        problems += finding(f"{shown(current)}: still running after {MAX_SECONDS:g} s of probes "
                            "(catastrophic backtracking hangs every request that meets it)")
    elif not events or events[-1] != ["done"]:
        problems += finding(f"{shown(current)}: the tokenizers process died (exit {code}; over "
                            f"{MAX_MEMORY >> 20} MiB of memory, or a crash)")
    return problems
