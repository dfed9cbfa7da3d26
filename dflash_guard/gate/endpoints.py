"""Which live engines the gate diffs: the policy's endpoint rules with the operator's overrides,
and the one API key the operator names."""

from __future__ import annotations

import dataclasses
import os

from dflash_guard.errors import InputError
from dflash_guard.gate.inputs import EndpointOverrides
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.trust.policy import EndpointRules, Policy
from dflash_guard.urls import http_endpoint, metrics_url


def engines_from_policy(rules: EndpointRules, api_key: str | None,
                        key_source: str | None) -> tuple[EngineEndpoint, EngineEndpoint]:
    """The baseline and candidate engines the endpoint rules name, built once for the endpoint
    diff and the rollout bench: the operator's API key (`resolve_api_key`), the candidate's
    metrics at its origin when `metrics` is on."""
    baseline = EngineEndpoint(rules.baseline, model=rules.model, api_key=api_key,
                              key_source=key_source, timeout=rules.timeout_s)
    candidate = dataclasses.replace(
        baseline, url=rules.candidate,
        metrics_url=metrics_url(rules.candidate) if rules.metrics else None)
    return baseline, candidate


def resolve_api_key(policy: Policy, overrides: EndpointOverrides) -> str | None:
    """The API key the endpoint checks send, if any. Only a variable the operator names
    (`--api-key-env`) is read, and only for endpoints named on the command line: a policy file
    sits next to the URLs it names, so it can neither pick a variable nor a host for a key."""
    rules = policy.difftest.endpoints
    asked = rules.api_key_env if rules is not None else None
    name = overrides.api_key_env
    if asked is not None and asked != name:
        raise InputError(f"difftest.endpoints.api_key_env asks to send the variable {asked} as "
                         f"an API key; a key is sent only when the operator names it: pass "
                         f"--api-key-env {asked} with --baseline and --candidate")
    if name is None:
        return None
    if not (overrides.baseline and overrides.candidate):
        raise InputError("--api-key-env: the key goes only to hosts named on the command line; "
                         "pass --baseline and --candidate")
    key = os.environ.get(name, "").strip()
    if not key:
        raise InputError(f"--api-key-env names {name}, but that variable is unset or empty")
    return key


def resolve_endpoints(policy: Policy, overrides: EndpointOverrides) -> EndpointRules | None:
    """The endpoint diff to run: the policy's, with URLs overridden at gate time; the policy's
    settings with both URLs when it names none; None when neither configures one."""
    rules = policy.difftest.endpoints
    baseline, candidate = overrides.baseline, overrides.candidate
    if rules is None and (baseline or candidate):
        if not (baseline and candidate):
            raise InputError("the policy names no endpoints: give both --baseline and "
                             "--candidate")
        rules = EndpointRules(baseline, candidate, max_new_tokens=policy.difftest.max_new_tokens)
    if rules is None:
        return None
    rules = dataclasses.replace(rules, baseline=baseline or rules.baseline,
                                candidate=candidate or rules.candidate)
    for flag, url in (("--baseline", rules.baseline), ("--candidate", rules.candidate)):
        if not url:
            raise InputError(f"the policy's difftest.endpoints names no {flag[2:]} URL: give "
                             f"{flag} URL")
        http_endpoint(url, flag)
    return rules
