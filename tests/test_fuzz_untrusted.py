"""Issue 45 item 6: every parser of untrusted input ends in its one documented error or a value.

Each parser gets a valid document with one field replaced by a random JSON value (wrong types,
huge and negative integers, NaN and infinities, long strings, dates, nesting), plus random text
or bytes: policies, lockfiles, approval records (and what reads them next: the policy binding,
the acceptance length), OSV advisories (and the matcher over a lock), feed files, the HTTP
answers of engines (completions, chat completions, Prometheus metrics and the monitor's figures)
and URLs (`urls`, `is_loopback`). Anything but the parser's own error is a failure.
There is no SARIF reader to fuzz: the tool only writes SARIF.

Derandomized (the same examples every run) and deadline-free; the example counts (EXAMPLES) keep
the whole file under 30 s; `DFLASH_GUARD_FUZZ_SCALE=N` runs N times as many, unseeded.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import parse_lockfile
from dflash_guard.trust.policy import builtin_policy_path, load_policy, parse_policy

EXAMPLES = {"policy": 100, "lockfile": 150, "record": 200, "osv": 150, "feed": 100,
            "completion": 200, "metrics": 200, "url": 300}
# A longer, random hunt: DFLASH_GUARD_FUZZ_SCALE=20 runs 20 times the examples, unseeded.
SCALE = int(os.environ.get("DFLASH_GUARD_FUZZ_SCALE", "1"))


def fuzz(kind: str) -> settings:
    return settings(max_examples=EXAMPLES[kind] * SCALE, deadline=None, derandomize=SCALE == 1,
                    database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


HUGE = st.sampled_from([10**30, -(10**30), 2**63, -(2**63) - 1, 10**4000, 1e308, -1e308])
SCALARS = (st.none() | st.booleans() | st.integers() | HUGE
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40)
           | st.sampled_from(["", " ", "sha256:" + "a" * 64, "a" * 64, "../../etc/passwd",
                              "https://example.invalid/x", "2026-13-45", "1e400", "NaN"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)


def _paths(value: Any, here: tuple = ()) -> Iterator[tuple]:
    """Every path (keys and indexes) into a JSON-like document, the root included."""
    yield here
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*here, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*here, index))


def _replaced(document: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    result = copy.deepcopy(document)
    here = result
    for part in path[:-1]:
        here = here[part]
    here[path[-1]] = value
    return result


def mutations(seed: Any, values: st.SearchStrategy = JSON) -> st.SearchStrategy:
    """`seed` with one field (any depth) replaced by a random value, or a key dropped."""
    paths = list(_paths(seed))

    def drop(path: tuple) -> Any:
        if not path:
            return seed
        result = copy.deepcopy(seed)
        here = result
        for part in path[:-1]:
            here = here[part]
        del here[path[-1]]
        return result

    return (st.tuples(st.sampled_from(paths), values).map(lambda pv: _replaced(seed, *pv))
            | st.sampled_from(paths).map(drop))


# --- policies -----------------------------------------------------------------------------------

POLICY_SEED = yaml.safe_load(builtin_policy_path("default").read_text())
POLICY_VALUES = JSON | st.dates() | st.sampled_from(["builtin", "prompts.jsonl", "feeds/",
                                                      "extends", "dev", "reviewed-only"])


@fuzz("policy")
@given(mutations(POLICY_SEED, POLICY_VALUES))
def test_policy_parser(document):
    with tempfile.TemporaryDirectory() as folder:
        try:
            text = yaml.safe_dump(document, sort_keys=False)
        except (yaml.YAMLError, OverflowError, ValueError):
            return
        with contextlib.suppress(InputError):
            parse_policy(text, "fuzz.yaml", base=Path(folder))


@fuzz("policy")
@given(st.text(max_size=300))
def test_policy_parser_on_text(text):
    with contextlib.suppress(InputError):
        parse_policy(text, "fuzz.yaml", base=Path("/nonexistent"))


# --- lockfiles ----------------------------------------------------------------------------------

def _lock_seed() -> Any:
    from tests.support.audit import write_lock

    with tempfile.TemporaryDirectory() as folder:
        return yaml.safe_load(write_lock(Path(folder) / "l.lock", engine_commit="a" * 40)
                              .read_text())


LOCK_SEED = _lock_seed()


@fuzz("lockfile")
@given(mutations(LOCK_SEED))
def test_lockfile_parser(document):
    try:
        text = json.dumps(document)
    except ValueError:
        return
    with contextlib.suppress(InputError):
        parse_lockfile(text, "fuzz.lock")


# --- approval records ---------------------------------------------------------------------------

def _record_seed() -> Any:
    from tests.trust.test_untrusted_records import valid_record

    return valid_record()


RECORD_SEED = _record_seed()
DEFAULT = load_policy("default")


@fuzz("record")
@given(mutations(RECORD_SEED))
def test_approval_record_reader_and_what_reads_it_next(document):
    """`read_approval`, then the fields `verify-approval` and `monitor --record` use."""
    from dflash_guard.trust.provenance import acceptance_length, parse_approval, policy_binding

    try:
        raw = json.dumps(document).encode()
    except ValueError:
        return
    try:
        statement = parse_approval(raw, Path("fuzz.json"))
    except InputError:
        return
    assert policy_binding(statement, DEFAULT) is None or True  # a reason or None, no crash
    tau = acceptance_length(statement)
    assert tau is None or (math.isfinite(tau) and 1 <= tau <= 1000)


@fuzz("record")
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_approval_record_reader_on_bytes(raw):
    from dflash_guard.trust.provenance import parse_approval

    with contextlib.suppress(InputError):
        parse_approval(raw, Path("fuzz.json"))


# --- OSV advisories and feeds -------------------------------------------------------------------

def _osv_seed() -> Any:
    from tests.support.audit import ENGINE_URL, git_range, osv

    return osv("x_FUZZ-1", [
        {"package": {"ecosystem": "PyPI", "name": "vllm"},
         "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "0.9.1"}]}]},
        {"ranges": [git_range(ENGINE_URL, introduced="0", fixed="b" * 40)]},
    ])


OSV_SEED = _osv_seed()


@pytest.fixture(scope="module")
def subjects():
    from dflash_guard.audit.match import lock_subjects
    from dflash_guard.pins.lockfile import load_lockfile
    from tests.support.audit import write_lock

    with tempfile.TemporaryDirectory() as folder:
        lock = load_lockfile(write_lock(Path(folder) / "l.lock", engine_commit="a" * 40))
    return lock_subjects(lock)


@fuzz("osv")
@given(document=mutations(OSV_SEED))
def test_osv_parser_and_matcher(subjects, document):
    from dflash_guard.audit.match import match_lock
    from dflash_guard.audit.osv import parse_advisories

    try:
        advisories = parse_advisories(document, "fuzz.json")
    except InputError:
        return
    with contextlib.suppress(InputError):
        match_lock(advisories, subjects, {})


@fuzz("feed")
@given(st.binary(max_size=300)
       | mutations(OSV_SEED).map(lambda d: json.dumps(d, default=str).encode()))
def test_feed_file_reader(data):
    from dflash_guard.audit.feeds import FeedRules, read_feed

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "feed.json"
        path.write_bytes(data)
        with contextlib.suppress(InputError):
            read_feed(path, FeedRules())


# --- HTTP answers -------------------------------------------------------------------------------

COMPLETION_SEED = {
    "choices": [{"text": "ab", "finish_reason": "length", "logprobs": {
        "tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2],
        "top_logprobs": [{"a": -0.1, "c": -2.0}, {"b": -0.2, "d": -3.0}]}}],
    "usage": {"completion_tokens": 2}, "timings": {"draft_n": 4, "draft_n_accepted": 3},
}
CHAT_SEED = {
    "choices": [{"message": {"content": "ab"}, "logprobs": {"content": [
        {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}]},
        {"token": "b", "logprob": -0.2, "top_logprobs": [{"token": "b", "logprob": -0.2}]}]}}],
}


@fuzz("completion")
@given(mutations(COMPLETION_SEED) | mutations(CHAT_SEED))
def test_engine_answers(payload):
    """An engine's answer is a `Completion` or a `ValueError` (the client makes it an
    `EndpointError`: the gate refuses, 'a gate that cannot check does not approve')."""
    from dflash_guard.lossless.endpoint.client import parse_chat_completion, parse_completion

    for parse in (parse_completion, parse_chat_completion):
        with contextlib.suppress(ValueError):
            parse(payload)


METRIC_NAMES = st.sampled_from(["vllm:spec_decode_num_drafts_total",
                                "vllm:spec_decode_num_draft_tokens_total",
                                "vllm:spec_decode_num_accepted_tokens_total",
                                'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="3"}',
                                "sglang:spec_accept_length", "sglang:spec_accept_rate"])
METRIC_VALUES = st.sampled_from(["0", "1", "-1", "1e308", "1e400", "NaN", "+Inf", "-Inf",
                                 "9" * 400, "0x10", "1_000"]) | st.floats().map(repr)
METRIC_LINES = st.lists(st.tuples(METRIC_NAMES, METRIC_VALUES).map(" ".join)
                        | st.text(max_size=60), max_size=8).map("\n".join)


@fuzz("metrics")
@given(METRIC_LINES, METRIC_LINES)
def test_prometheus_answers_and_the_monitor(before, after):
    from dflash_guard.lossless.endpoint.engine import EngineEndpoint
    from dflash_guard.lossless.endpoint.metrics import parse_prometheus
    from dflash_guard.rollout.monitor import MonitorOptions, alarms_for, interval_reading

    old, new = parse_prometheus(before), parse_prometheus(after)
    try:
        reading = interval_reading(old, new, 1.0)
    except InputError:
        return
    assert reading.tau is None or math.isfinite(reading.tau)
    options = MonitorOptions(EngineEndpoint("http://127.0.0.1:9"), baseline_tau=3.0)
    alarms_for(reading, options)


# --- URLs ---------------------------------------------------------------------------------------

URL_TEXT = (st.text(max_size=60)
            | st.builds(lambda s, h, p: f"{s}://{h}{p}",
                        st.sampled_from(["http", "https", "HTTP", "ftp", "file", "git+ssh"]),
                        st.sampled_from(["127.0.0.1", "[::ffff:127.0.0.1]", "[::1", "127.1",
                                         "u:p@h", "h:99999", "h:0", "[fe80::1%25lo]", "h:-1",
                                         "localhost"]) | st.text(max_size=20),
                        st.text(max_size=20)))


@fuzz("url")
@given(URL_TEXT)
def test_urls(text):
    from dflash_guard.download import check_url
    from dflash_guard.urls import check_recorded_url, http_endpoint, is_loopback, repo_key

    is_loopback(text)
    repo_key(text)
    for parse in (lambda u: http_endpoint(u, "url"), lambda u: check_recorded_url(u, "url"),
                  lambda u: check_url(u, "feed")):
        with contextlib.suppress(InputError):
            parse(text)


def test_the_seeds_are_valid():
    """Each mutation starts from a document the parser accepts (so the fuzz reaches deep)."""
    from dflash_guard.audit.osv import parse_advisories
    from dflash_guard.lossless.endpoint.client import parse_chat_completion, parse_completion
    from dflash_guard.trust.provenance import parse_approval

    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        (base / "prompts.jsonl").write_text("")
        parse_policy(yaml.safe_dump(POLICY_SEED, sort_keys=False), "seed.yaml", base=base)
    parse_lockfile(json.dumps(LOCK_SEED), "seed.lock")
    parse_approval(json.dumps(RECORD_SEED).encode(), Path("seed.json"))
    assert parse_advisories(OSV_SEED, "seed.json")
    parse_completion(COMPLETION_SEED)
    parse_chat_completion(CHAT_SEED)
    assert dt.date  # dates are among the policy values
