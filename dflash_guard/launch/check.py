"""`launch --check ENGINE -- COMMAND...`: lint an existing serve command against a lock and a
policy. Each problem is a scan `Finding` (rules `DG-LAUNCH-*`), reported under the flag it is
about, so the text, JSON and SARIF renderers of `scan` render it.

What is found: a model or drafter that is not the locked one (another repo, a folder whose files
differ from the lock, a path that is not on this machine), a Hub revision that is missing or a
branch (`main`) or another commit, trust-remote-code over code the policy has not approved, a
bind outside loopback without an API key, a resource cap of the policy's `launch` section that is
missing or exceeded, a speculative method or token count unlike the policy's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from dflash_guard import rules
from dflash_guard.errors import InputError
from dflash_guard.launch.engines import FLAGS, cap_flag, parse_args
from dflash_guard.launch.plan import (
    DEFAULT_METHOD,
    ENGINES,
    LaunchRefused,
    is_loopback,
    remote_code_problems,
    verify_folder,
)
from dflash_guard.patterns import COMMIT_RE
from dflash_guard.pins.hashing import hash_files
from dflash_guard.pins.lockfile import Artifact, Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.scan.interface import Finding
from dflash_guard.trust.policy import Policy

DETECTOR = "launch-check"


@dataclasses.dataclass(frozen=True)
class LaunchCheckReport:
    """The findings about one command line."""

    engine: str
    command: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine, "command": list(self.command), "passed": self.passed,
                "findings": [f.to_json() for f in self.findings], "summary": self.summary()}

    def artifact_path(self, finding: Finding) -> None:
        """None: a finding is about a flag of the command line, not a file."""
        return None

    def summary(self) -> str:
        if self.passed:
            return f"launch check: passed ({self.engine}: the command loads what the lock pins)"
        worst = max(f.severity for f in self.findings)
        return (f"launch check: refused ({self.engine}: {len(self.findings)} finding(s), "
                f"worst {worst.name})")


def _finding(rule: rules.Rule, flag: str, message: str) -> Finding:
    return Finding.of(rule, flag, message, detector=DETECTOR)


def _compare(lock: Lockfile, artifact: Artifact, location: str | None, revision: str | None,
             flag: str, revision_flag: str | None, progress: Progress) -> list[Finding]:
    """Whether `location` (at `revision`) is the locked `artifact` (hashing a file or folder on
    this machine as a stage of `progress`)."""
    if location is None:
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag,
                         f"no {flag}: the {artifact.role} is not named")]
    path = Path(location).expanduser()
    if path.is_file():  # a GGUF file: its sha256 must be a locked file's
        hashed = hash_files([path], progress=progress, stage_name=f"hashing {artifact.role}")
        if hashed[path] in {f.sha256 for f in artifact.files}:
            return []
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag, f"{location}: its sha256 is none of the "
                         f"locked {artifact.role} {artifact.label}'s files")]
    if path.is_dir():
        try:
            verify_folder(lock, artifact, path, progress)
        except LaunchRefused as refused:
            return [_finding(rules.LAUNCH_NOT_LOCKED, flag, str(refused))]
        return []
    if artifact.source != "hub" or (artifact.repo or "").casefold() != location.casefold():
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag,
                         f"{location} is not the locked {artifact.role} ({artifact.label}), nor "
                         "a folder on this machine to verify")]
    where = revision_flag or "a revision"
    if revision is None:
        return [_finding(rules.LAUNCH_UNPINNED, revision_flag or flag,
                         f"{location} without {where}: the engine loads whatever the repo's "
                         f"default branch holds at start-up (the lock pins {artifact.commit})")]
    if not COMMIT_RE.match(revision):
        return [_finding(rules.LAUNCH_UNPINNED, revision_flag or flag,
                         f"{location} at {revision!r}, a branch or tag that can move (the lock "
                         f"pins {artifact.commit})")]
    if revision != artifact.commit:
        return [_finding(rules.LAUNCH_NOT_LOCKED, revision_flag or flag,
                         f"{location} at {revision}, the lock pins {artifact.commit}")]
    return []


def _last(flags: dict[str, list[str | None]], name: str | None) -> str | None:
    """The value the engine uses for `name` (the last one given)."""
    values = flags.get(name or "") or [None]
    return values[-1]


def _drafter(engine: str, flags: dict[str, list[str | None]]
             ) -> tuple[dict[str, object] | None, list[Finding]]:
    """The drafter the command loads: model, revision, method, tokens (None: no drafter)."""
    spec = FLAGS[engine]
    raw = _last(flags, spec.drafter)
    if raw is None:
        return None, []
    if engine != "vllm":
        method = DEFAULT_METHOD if engine == "llama.cpp" else _last(flags, "speculative_algorithm")
        if engine == "llama.cpp" and _last(flags, "spec_type") != "draft-dflash":
            method = _last(flags, "spec_type")
        return {"model": raw, "revision": _last(flags, spec.drafter_revision),
                "method": (method or "").lower() or None,
                "tokens": _last(flags, spec.tokens)}, []
    try:
        config = json.loads(raw)
    except ValueError:
        config = None
    if not isinstance(config, dict):
        return None, [_finding(rules.LAUNCH_NOT_LOCKED, "--speculative-config",
                               "not a JSON object: the drafter cannot be checked")]
    return {"model": config.get("model"), "revision": config.get("revision"),
            "method": config.get("method"), "tokens": config.get("num_speculative_tokens")}, []


def _speculative(policy: Policy, engine: str, drafter: dict[str, object]) -> list[Finding]:
    expected = policy.launch
    if expected is None:
        return []
    flag = "--" + FLAGS[engine].drafter.replace("_", "-")
    found = []
    if expected.speculative_method and drafter["method"] != expected.speculative_method:
        found.append(_finding(rules.LAUNCH_SPECULATIVE, flag, f"speculative method "
                              f"{drafter['method']!r}, the policy expects "
                              f"{expected.speculative_method!r}"))
    tokens = drafter["tokens"]
    if expected.num_speculative_tokens and str(tokens) != str(expected.num_speculative_tokens):
        found.append(_finding(rules.LAUNCH_SPECULATIVE, flag, f"{tokens} speculative tokens, the "
                              f"policy expects {expected.num_speculative_tokens}"))
    return found


def _caps(policy: Policy, engine: str, flags: dict[str, list[str | None]]) -> list[Finding]:
    caps = policy.launch.caps.get(engine, {}) if policy.launch else {}
    found = []
    for name, cap in sorted(caps.items()):
        given = _last(flags, name)
        try:
            value = float(given) if given is not None else None
        except ValueError:
            value = None
        if value is None:
            found.append(_finding(rules.LAUNCH_CAPS, cap_flag(name), f"{cap_flag(name)} is not set "
                                  f"(the policy caps it at {cap})"))
        elif value > cap:
            found.append(_finding(rules.LAUNCH_CAPS, cap_flag(name), f"{cap_flag(name)} {given} is "
                                  f"over the policy's cap of {cap}"))
    return found


def _bind(engine: str, flags: dict[str, list[str | None]]) -> list[Finding]:
    host = _last(flags, "host") or FLAGS[engine].default_host
    if is_loopback(host) or _last(flags, "api_key") or _last(flags, "api_key_file"):
        return []
    unset = "" if "host" in flags else f" (no --host: {engine} binds {host})"
    key_env = FLAGS[engine].key_env
    note = f"; a key in {key_env} is not visible to this check" if key_env else ""
    return [_finding(rules.LAUNCH_EXPOSED, "--host",
                     f"binds {host}{unset} without --api-key: anyone who reaches the port can "
                     f"use the model{note}")]


def check_command(lock: Lockfile, policy: Policy, engine: str, command: list[str],
                  progress: Progress = NO_PROGRESS) -> LaunchCheckReport:
    """Lint `command` (a serve command line of `engine`) against `lock` and `policy`; hashing
    the files and folders it names is a stage of `progress` each."""
    if engine not in ENGINES:
        raise InputError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if not command:
        raise InputError("launch --check: give the command after `--`")
    spec = FLAGS[engine]
    flags, positionals = parse_args(engine, command)
    target, drafter_artifact = lock.artifact("target"), lock.artifact("drafter")
    assert target is not None and drafter_artifact is not None  # every lockfile has both
    if engine == "llama.cpp" and lock.artifact("gguf") is not None:
        drafter_artifact = lock.artifact("gguf")
    assert drafter_artifact is not None
    model = _last(flags, spec.model)
    if model is None and "serve" in positionals[:-1]:  # `vllm serve MODEL`
        model = positionals[positionals.index("serve") + 1]
    revision_flag = "--" + spec.revision.replace("_", "-") if spec.revision else None
    findings = _compare(lock, target, model, _last(flags, spec.revision),
                        "--" + spec.model.replace("_", "-"), revision_flag, progress)
    tokenizer_revision = _last(flags, "tokenizer_revision")
    if tokenizer_revision and tokenizer_revision != target.commit:
        findings.append(_finding(rules.LAUNCH_NOT_LOCKED, "--tokenizer-revision",
                                 f"{tokenizer_revision}, the lock pins {target.commit}"))
    drafter, problems = _drafter(engine, flags)
    findings += problems
    loaded = ["target"]
    if drafter is not None:
        loaded.append(drafter_artifact.role)
        flag = "--" + spec.drafter.replace("_", "-")
        revision = drafter["revision"]
        findings += _compare(lock, drafter_artifact, str(drafter["model"] or "") or None,
                             str(revision) if revision is not None else None, flag, flag,
                             progress)
        findings += _speculative(policy, engine, drafter)
    if "trust_remote_code" in flags:
        findings += [_finding(rules.LAUNCH_REMOTE_CODE, "--trust-remote-code", problem)
                     for problem in remote_code_problems(lock, policy, loaded)]
    findings += _bind(engine, flags)
    findings += _caps(policy, engine, flags)
    return LaunchCheckReport(engine, tuple(command), tuple(findings))
