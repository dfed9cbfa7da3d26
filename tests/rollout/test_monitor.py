"""`dflash-guard monitor` against a fake metrics server that replays scripted counter series:
one series per failure (collapse, drop, leakage) alarms, a healthy one (and a counter reset)
stays quiet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from dflash_guard.gate.record import policy_descriptor
from dflash_guard.trust.closure import canonical_digest, policy_closure
from dflash_guard.trust.intoto import Statement, Subject
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import PREDICATE_TYPE
from dflash_guard.trust.signing import sign_with_key
from tests.support.endpoint_fakes import serve
from tests.support.trust import make_key_pair


def counters(drafts: int, drafted: int, accepted: int, prefix: str = "llamacpp") -> str:
    """A Prometheus page with an engine's speculative-decoding counters."""
    return (f"# TYPE {prefix}:spec_decode_num_drafts_total counter\n"
            f"{prefix}:spec_decode_num_drafts_total {drafts}\n"
            f"{prefix}:spec_decode_num_draft_tokens_total {drafted}\n"
            f'{prefix}:spec_decode_num_accepted_tokens_total{{model="m"}} {accepted}\n')


# name -> the pages served one after another (the last one repeats)
SERIES = {
    "healthy": [counters(0, 0, 0), counters(100, 1500, 400)],  # tau 5.0
    "reset": [counters(1000, 15000, 4000), counters(100, 1500, 400)],  # restarted: tau 5.0
    "idle": [counters(10, 150, 40), counters(10, 150, 40)],  # nothing drafted: cannot tell
    "sglang-nan": ["sglang:spec_accept_length NaN\n"] * 2,  # a gauge that says nothing
    "vllm-inf": [counters(0, 0, 0), counters(1e308, 1e308, float("inf"))],
    "collapse": [counters(0, 0, 0), counters(100, 1500, 2)],  # tau 1.02
    "drop": [counters(0, 0, 0), counters(100, 1500, 200)],  # tau 3.0 against 5.0
    "leakage": [counters(0, 0, 0), counters(100, 1500, 1500)],  # every token accepted
    "vllm-healthy": [counters(0, 0, 0, "vllm"), counters(50, 750, 200, "vllm")],
    "sglang-collapse": ["sglang:spec_accept_length 1.01\n"] * 2,
    # SGLang publishes 0 when it does not speculate: no tau, not a collapse
    "sglang-off": ["sglang:spec_accept_length 0.0\nsglang:spec_accept_rate 0.0\n"] * 2,
    "no-counters": ["process_cpu_seconds_total 3\n"] * 2,
}


@contextmanager
def replaying(pages: list[str]) -> Iterator[str]:
    """A metrics server answering `pages` in order; yields its `/metrics` URL."""
    served = iter(pages)
    last = [pages[0]]

    async def metrics(_request):
        last[0] = next(served, last[0])
        return PlainTextResponse(last[0])

    with serve(Starlette(routes=[Route("/metrics", metrics)])) as base:
        yield base + "/metrics"


def monitor(cli, series: str, *extra: str):
    with replaying(SERIES[series]) as url:
        return cli("monitor", "--metrics", url, "--interval", "0", "--once",
                   "--baseline-tau", "5", "--format", "json", *extra)


@pytest.mark.parametrize("series", ["healthy", "reset", "vllm-healthy"])
def test_quiet_on_healthy_series(cli, series):
    result = monitor(cli, series)
    assert result.exit_code == 0, result.stdout + result.stderr
    reading = json.loads(result.stdout)
    assert reading["passed"] is True and reading["alarms"] == []
    assert reading["reset"] is (series == "reset")
    assert reading["tau"] == pytest.approx(5.0)


@pytest.mark.parametrize(("series", "kind"), [
    ("collapse", "collapse"), ("drop", "drop"), ("leakage", "leakage"),
    ("sglang-collapse", "collapse"),
    # Issue 25 class 6: no figure is "cannot tell", an alarm, never "ok" (N19: a NaN gauge).
    ("idle", "cannot-tell"), ("sglang-nan", "cannot-tell"), ("vllm-inf", "cannot-tell"),
    ("sglang-off", "cannot-tell"),
])
def test_alarms_on_each_failure_series(cli, series, kind):
    result = monitor(cli, series)
    assert result.exit_code == 1, result.stdout + result.stderr
    reading = json.loads(result.stdout)
    assert reading["passed"] is False
    assert kind in {a["kind"] for a in reading["alarms"]}


def test_drop_threshold_is_honoured(cli):
    assert monitor(cli, "drop", "--max-drop", "50").exit_code == 0  # 40% < 50%
    assert monitor(cli, "drop", "--max-drop", "30").exit_code == 1


def test_several_intervals_one_line_each(cli):
    pages = [counters(0, 0, 0), counters(100, 1500, 400), counters(200, 3000, 402)]
    with replaying(pages) as url:
        result = cli("monitor", "--metrics", url, "--interval", "0", "--intervals", "2",
                     "--format", "json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [bool(r["alarms"]) for r in lines] == [False, True]
    assert result.exit_code == 1


def test_text_output_names_the_alarm(cli):
    with replaying(SERIES["leakage"]) as url:
        result = cli("monitor", "--metrics", url, "--interval", "0", "--once")
    assert result.exit_code == 1
    assert "ALARM leakage" in result.stdout


def test_baseline_from_the_approval_record(cli, tmp_path):
    record = tmp_path / "approval.json"
    private, public = make_key_pair(tmp_path)
    policy = tmp_path / "p.yaml"
    policy.write_text(f"extends: default\nname: mine\nsignatures:\n  approvals: "
                      f"{{identities: [], public_keys: [{public}]}}\n")

    def write_record(descriptor: dict) -> None:
        difftest = {"name": "difftest", "verdict": "passed", "reason": "",
                    "evidence": {"acceptance_length": 6.0}}
        statement = Statement((Subject("target", {"sha256": "0" * 64}),), PREDICATE_TYPE,
                              {"policy": descriptor,
                               "checks": [difftest]})
        record.write_bytes(statement.dumps())
        sign_with_key(record, private)

    loaded = load_policy(str(policy))
    write_record(policy_descriptor(loaded, policy_closure(loaded)))
    signed = ("--record", record, "--policy", policy)
    with replaying(SERIES["healthy"]) as url:  # tau 5.0 is 17% below 6.0
        loose = cli("monitor", "--metrics", url, "--interval", "0", "--once", *signed)
    with replaying(SERIES["healthy"]) as url:
        strict = cli("monitor", "--metrics", url, "--interval", "0", "--once", *signed,
                     "--max-drop", "10")
    assert loose.exit_code == 0, loose.stderr
    assert strict.exit_code == 1 and "ALARM drop" in strict.stdout
    # An edited record is no baseline (issue 25: monitor --record uses verify-approval).
    record.write_bytes(record.read_bytes().replace(b"6.0", b"1.5"))
    with replaying(SERIES["healthy"]) as url:
        edited = cli("monitor", "--metrics", url, "--interval", "0", "--once", *signed)
    assert edited.exit_code == 2 and "not signed by an approval signer" in edited.stderr
    # A signed record approved under another policy is no baseline under this one (P4).
    other_listing = {"text_sha256": "f" * 64, "extends": None, "files": []}
    write_record({"name": "mine", "digest": {"sha256": canonical_digest(other_listing)},
                  "closure": other_listing})
    with replaying(SERIES["healthy"]) as url:
        other = cli("monitor", "--metrics", url, "--interval", "0", "--once", *signed)
    assert other.exit_code == 2 and "not under 'mine'" in other.stderr
    with replaying(SERIES["healthy"]) as url:  # the built-in default policy accepts nobody
        unsigned = cli("monitor", "--metrics", url, "--interval", "0", "--once", "--record",
                       record)
    assert unsigned.exit_code == 2


@pytest.mark.parametrize("case", ["no-counters", "unreachable", "both-baselines"])
def test_input_errors_exit_2(cli, tmp_path, case):
    if case == "no-counters":
        result = monitor(cli, "no-counters")
        assert "no speculative-decoding counters" in result.stderr
    elif case == "unreachable":
        result = cli("monitor", "--metrics", "http://127.0.0.1:9/metrics", "--interval", "0",
                     "--once", "--timeout", "2")
        assert "unreachable" in result.stderr
    else:
        result = monitor(cli, "healthy", "--record", tmp_path / "approval.json")
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr


def test_example_alert_rules_compute_the_same_ratio():
    """The shipped Prometheus rules use the counters and thresholds `monitor` uses."""
    from pathlib import Path

    import yaml

    from dflash_guard.lossless.endpoint.metrics import ACCEPTED, COUNTER_PREFIXES, DRAFTS
    from dflash_guard.rollout.monitor import DEFAULT_MAX_DROP_PCT, DEFAULT_MIN_TAU, LEAKAGE_RATE

    path = Path(__file__).resolve().parents[2] / "examples" / "prometheus-dflash-alerts.yml"
    rules = yaml.safe_load(path.read_text())["groups"][0]["rules"]
    taus = [r["expr"] for r in rules if r.get("record") == "dflash:spec_decode_tau:rate5m"]
    assert {p for p in COUNTER_PREFIXES if any(
        f"1 + rate({p}:{ACCEPTED}_total[5m]) / rate({p}:{DRAFTS}_total[5m])"
        in " ".join(e.split()) for e in taus)} == set(COUNTER_PREFIXES)
    alerts = {r["alert"]: " ".join(r["expr"].split()) for r in rules if "alert" in r}
    assert alerts["DFlashAcceptanceCollapsed"].endswith(f"< {DEFAULT_MIN_TAU}")
    assert f"(1 - {DEFAULT_MAX_DROP_PCT:g} / 100)" in alerts["DFlashAcceptanceDropped"]
    assert alerts["DFlashAcceptanceTooPerfect"].endswith(f">= {LEAKAGE_RATE}")


def _example_rules() -> tuple[str, list[dict]]:
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "examples" / "prometheus-dflash-alerts.yml"
    text = path.read_text()
    return text, [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]


def test_example_rules_have_no_duplicates_for_promtool():
    """promtool's lint (`check rules --lint-fatal`, exit 3) refuses two recording rules with
    the same name and labels; each engine's rule carries its own `engine` label. Every rule
    has the fields Prometheus's rule format requires."""
    _, rules = _example_rules()
    recorded = [(r["record"], tuple(sorted(r.get("labels", {}).items())))
                for r in rules if "record" in r]
    assert len(recorded) == len(set(recorded)) == 4
    alerts = [r["alert"] for r in rules if "alert" in r]
    assert len(alerts) == len(set(alerts)) == 3
    for rule in rules:
        assert ("record" in rule) != ("alert" in rule) and rule["expr"], rule
        assert set(rule) <= {"record", "alert", "expr", "for", "labels", "annotations"}, rule


def test_example_rules_name_the_baseline_field_a_record_has(cli, locked_pair, tmp_path):
    """The comment's jq path to the baseline tau reads a number out of a real v3 record."""
    import re

    from tests.support.trust import write_lock

    text, _ = _example_rules()
    check, field = re.search(r'select\(\.name == "(\w+)"\) \| \.evidence\.(\w+)', text).groups()
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    gated = cli("gate", "--lock", lock, "--policy", "dev", "--root",
                f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
                "-o", record, "-q")
    assert gated.exit_code == 0, gated.stderr
    [row] = [r for r in json.loads(record.read_text())["predicate"]["checks"]
             if r["name"] == check]
    assert row["evidence"][field] >= 1
    assert "predicate.acceptance_length" not in text  # the v2 field a v3 record lacks
