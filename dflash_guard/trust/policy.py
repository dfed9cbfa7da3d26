"""The deploy policy: a versioned YAML file, validated on load, that fails closed.

A policy (`policy_version: 1`) says which Hub organisations are trusted at which tier, what each
tier may do (signatures, remote code, pickle formats, staging), which remote code was reviewed,
which staging approvals and GGUF comparisons were recorded (by hand, or as a comparison record
written by `difftest reference --record`), the engine, scan and difftest rules,
the signer identities and keys accepted, and the waivers in force. Every field is checked on load:
an unknown or missing field, a wrong type or an impossible combination is an `InputError` naming
the file, the line and the field. Nothing is optional in a way that could mean "allow": a policy
that requires a signature but names nobody who could make one is rejected, like sigstore's `AllOf`
refusing an empty list of policies.

The three shipped policies live in `dflash_guard/policies/` (package data, so an installed
package has them); the repository's top-level `policies/` is a link to that folder.

The module is over 450 lines on purpose: it is the policy's schema, and each section's frozen
type sits next to the few lines that read and check it, so a reader sees a field's meaning and its
validation together; split apart, the two halves would drift.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import hashlib
import importlib.resources
import itertools
import math
import os
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_text
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN
from dflash_guard.patterns import ORG_RE, REPO_AT_COMMIT_RE, SHA256_RE
from dflash_guard.pins.lockfile import CACHE_UNCONFIRMED, UPSTREAM
from dflash_guard.schema import Field, merged, read_document
from dflash_guard.severity import Severity
from dflash_guard.trust.apple.image import AppPins
from dflash_guard.trust.engines import NO_RULES, EngineRules, parse_engine_rules
from dflash_guard.trust.model_card import ModelCardRules

if TYPE_CHECKING:
    from dflash_guard.pins.lockfile import Artifact
from dflash_guard.urls import has_scheme, http_endpoint, is_http_endpoint

POLICY_VERSION = 1
BUILTIN_POLICIES = ("default", "strict", "dev")


class TrustTier(StrEnum):
    """How much an artifact is trusted: by its Hub organisation, or `local_tier`."""

    official = "official"
    community = "community"
    unknown = "unknown"


class WaiverKind(StrEnum):
    """What a waiver may cover (`KIND:TARGET`)."""

    engine = "engine"
    remote_code = "remote-code"
    staging = "staging"
    scan = "scan"
    pickle = "pickle"
    gguf_comparison = "gguf-comparison"


TIERS = tuple(t.value for t in TrustTier)
WAIVER_KINDS = tuple(k.value for k in WaiverKind)

UPSTREAM_ROLES = tuple(UPSTREAM.values())  # the roles `upstream:` may name
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class RemoteCode(StrEnum):
    """What a tier may do with remote code (`*.py`, `auto_map` targets)."""

    reviewed_only = "reviewed-only"
    deny = "deny"
    allow = "allow"


class Templates(StrEnum):
    """What a tier may do with a chat template: `reviewed-only` accepts a published template of
    the catalog (`templates/known.json`) or one on `reviewed_templates`; `allow` any that
    passes the scan's checks."""

    reviewed_only = "reviewed-only"
    allow = "allow"


@dataclasses.dataclass(frozen=True)
class TierRule:
    """What an artifact of one trust tier must satisfy."""

    signature_required: bool
    remote_code: RemoteCode
    pickle_allowed: bool
    staging_required: bool
    templates: Templates = Templates.reviewed_only


@dataclasses.dataclass(frozen=True)
class Identity:
    """A Sigstore signer: certificate identity (SAN) and OIDC issuer, both matched exactly, or
    with `regexp` the identity as a regular expression the whole SAN must match (cosign's
    `--certificate-identity-regexp`, anchored)."""

    identity: str
    issuer: str
    regexp: bool = False

    def __str__(self) -> str:
        shown = f"/{self.identity}/ (a regexp)" if self.regexp else self.identity
        return f"{shown} ({self.issuer})"


@dataclasses.dataclass(frozen=True)
class Signers:
    """Who may sign one kind of object: Sigstore identities and/or public key files (PEM)."""

    identities: tuple[Identity, ...]
    public_keys: tuple[Path, ...]

    @property
    def empty(self) -> bool:
        return not self.identities and not self.public_keys

    def __or__(self, other: Signers) -> Signers:
        """These signers and `other`'s (the policy's, and those the operator adds)."""
        return Signers(tuple(dict.fromkeys((*self.identities, *other.identities))),
                       tuple(dict.fromkeys((*self.public_keys, *other.public_keys))))


@dataclasses.dataclass(frozen=True)
class ReviewedCode:
    """A remote-code file someone reviewed, known by its sha256."""

    sha256: str
    path: str
    reviewer: str
    date: dt.date


@dataclasses.dataclass(frozen=True)
class ReviewedTemplate:
    """A chat template someone reviewed, known by the sha256 of its UTF-8 text."""

    sha256: str
    note: str


@dataclasses.dataclass(frozen=True)
class ReviewedFile:
    """A file whose meaning someone reviewed (a `generation_config.json` whose defaults are not
    a published model's), known by the sha256 of its bytes, as the lock records it."""

    sha256: str
    note: str


@dataclasses.dataclass(frozen=True)
class Upstream:
    """The upstream of a deployed role (`upstream:`): the Hub repo and commit whose tokenizer,
    generation and template files the role's are compared with (`scan.upstream`), locked beside
    the deploy as `ROLE-upstream`."""

    role: str
    repo: str
    commit: str


@dataclasses.dataclass(frozen=True)
class StagingApproval:
    """A community or unknown artifact that ran in staging and was approved for production."""

    repo: str
    commit: str
    approver: str
    date: dt.date


@dataclasses.dataclass(frozen=True)
class GgufComparison:
    """A GGUF draft whose greedy output was compared against the safetensors path."""

    repo: str
    commit: str
    compared_with: str
    approver: str
    date: dt.date


@dataclasses.dataclass(frozen=True)
class Waiver:
    """A recorded, owned and dated exception to one rule (`covers` = `KIND:TARGET`)."""

    id: str
    kind: WaiverKind
    target: str
    reason: str
    owner: str
    expires: dt.date

    @property
    def covers(self) -> str:
        return f"{self.kind}:{self.target}"

    def expired(self, today: dt.date) -> bool:
        """A waiver is valid through its expiry date and expired the day after."""
        return today > self.expires


@dataclasses.dataclass(frozen=True)
class DifftestRules:
    """How the gate runs the greedy lossless diff test."""

    prompts: str | None  # None: the built-in prompt set; else a JSONL path
    max_new_tokens: int
    near_tie_allowance: float  # a divergence whose top-2 logit margin is below this is tolerated
    min_tau: float
    endpoints: EndpointRules | None = None  # None: the gate runs no endpoint diff
    # nats an engine's logprobs may differ from kernels_ref's in a reference diff; None: the
    # tolerance measured for the precision it serves (lossless.logprob_check.TOLERANCES)
    max_logprob_delta: float | None = None


@dataclasses.dataclass(frozen=True)
class EndpointRules:
    """How the gate diff-tests two live engines (`difftest.endpoints`): a baseline without
    speculation and the candidate with the drafter. The API key is named, never held."""

    baseline: str  # "": given at gate time (--baseline)
    candidate: str  # "": given at gate time (--candidate)
    model: str | None = None  # None: each server's first model
    api_key_env: str | None = None  # the NAME of an environment variable holding the key
    prompts: str | None = None  # None: the built-in prompt set; else a JSONL path
    max_new_tokens: int = 64
    max_near_ties: int = 0  # near-tie divergences tolerated; a hard divergence always refuses
    near_tie_margin: float = NEAR_TIE_MARGIN[ENGINE]  # nats: what counts as a near-tie
    # read the candidate's `/metrics`: its acceptance is held against kernels_ref's with the
    # locked drafter (on by default: a diff of endpoints checks the drafter unless told not to)
    metrics: bool = True
    concurrency: int = 4
    timeout_s: float = 60.0


@dataclasses.dataclass(frozen=True)
class RolloutRules:
    """The `rollout` section: the gate benches the endpoint diff's two engines at the expected
    concurrency and refuses when speculation is not at least `min_speedup` times as fast."""

    expected_concurrency: int
    min_speedup: float
    requests: int | None = None  # per endpoint; None: the bench's default for the tier


@dataclasses.dataclass(frozen=True)
class AdvisoryRules:
    """The `advisories` section: which OSV feeds the gate audits the lock against, who may sign
    them, whether an unsigned feed is acceptable, the severity that refuses and the maximum age
    of a feed (a stale feed refuses)."""

    feeds: tuple[str, ...]  # URLs, or paths resolved against the policy's folder
    signers: Signers
    allow_unsigned: bool
    fail_on: Severity
    max_age_days: int


@dataclasses.dataclass(frozen=True)
class Policy:
    """A validated policy. Build it with `load_policy`; `digest` is the sha256 of the file."""

    source: str
    digest: str
    name: str
    official_orgs: tuple[str, ...]
    community_orgs: tuple[str, ...]
    local_tier: TrustTier
    tiers: Mapping[TrustTier, TierRule]
    # An HF-cache snapshot no Hub answer confirmed: the org in a cache path is a label, so it
    # is trusted neither as that org nor as a folder built in house.
    cache_tier: TrustTier
    require_full_sha: bool
    gguf_requires_comparison: bool
    allow_pr_head: bool
    require_release: bool
    fail_on: Severity
    difftest: DifftestRules
    drafter_max_params: int
    lockfile_signature_required: bool
    lockfile_signers: Signers
    model_signers: Signers
    approval_signers: Signers
    reviewed_code: tuple[ReviewedCode, ...]
    staging_approvals: tuple[StagingApproval, ...]
    gguf_comparisons: tuple[GgufComparison, ...]
    waivers: tuple[Waiver, ...]
    document: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)
    reviewed_templates: tuple[ReviewedTemplate, ...] = ()
    reviewed_files: tuple[ReviewedFile, ...] = ()
    upstream: tuple[Upstream, ...] = ()
    # `gguf_comparisons` entries given as `record: PATH`: GGUF comparison records
    # (`difftest reference --record`), checked against the lock by the gate
    gguf_comparison_records: tuple[Path, ...] = ()
    advisories: AdvisoryRules | None = None  # None: the gate runs no advisory audit
    rollout: RolloutRules | None = None  # None: the gate runs no concurrency benchmark
    launch: LaunchRules | None = None  # None: `launch` adds no caps and expects no method
    # Why nothing could pass (a signature required from nobody): the gate refuses such a
    # policy; a built-in one is like that until a policy that `extends` it names signers.
    unsatisfiable: tuple[str, ...] = ()
    extends: str | None = None  # the built-in policy or policy file this one extends
    model_card: ModelCardRules = ModelCardRules()  # the drafter's card; every rule off by default
    require_engine: bool = False  # `engines.require_pinned`: a lock pinning no engine is refused
    engine_rules: EngineRules = NO_RULES  # engines.repositories: mirrors, releases, tag signers
    omlx: AppPins = AppPins()  # engines.omlx: the team (and roots) `verify-app` checks against
    # `scan.target_finite`: the gate reads every float of the target's loaded safetensors (a
    # target's NaN rows decode alike with and without the drafter: the diff test cannot see them)
    target_finite: bool = False

    def accepting(self, signers: Signers) -> Policy:
        """This policy with `signers` (given by the operator) also accepted for lockfiles,
        models and approvals; the digest stays the file's."""
        if signers.empty:
            return self
        return dataclasses.replace(self, lockfile_signers=self.lockfile_signers | signers,
                                   model_signers=self.model_signers | signers,
                                   approval_signers=self.approval_signers | signers)

    def tier_of(self, source: str, repo: str | None) -> TrustTier:
        """The trust tier of an artifact: by Hub organisation, or `local_tier` for local ones."""
        if source != "hub" or not repo:
            return self.local_tier
        org = repo.split("/", 1)[0].casefold()
        if org in {o.casefold() for o in self.official_orgs}:
            return TrustTier.official
        if org in {o.casefold() for o in self.community_orgs}:
            return TrustTier.community
        return TrustTier.unknown

    def artifact_tier(self, artifact: Artifact, provenance_trusted: bool) -> TrustTier:
        """The tier of a locked artifact (`dflash_guard.pins.lockfile.Artifact`): its Hub
        organisation's only when its Hub provenance was confirmed and the claim is trusted (a
        signed lockfile, see `trust.evidence`); a confirmed claim in an unsigned lock is trusted
        as a local folder; a `cache-unconfirmed` snapshot (the org in a path proves nothing)
        gets `cache_tier`."""
        if artifact.source == "hub" and artifact.provenance == CACHE_UNCONFIRMED:
            return self.cache_tier
        confirmed = artifact.hub_confirmed and provenance_trusted
        return self.tier_of("hub" if confirmed else "local", artifact.repo)

    def files(self) -> list[tuple[str, Path]]:
        """Every file the policy names (keys, feeds, records, prompt sets), as (field, path):
        what a command's outputs must never replace."""
        named: list[tuple[str, Path]] = [("--policy", Path(self.source))]
        signers = {"lockfile": self.lockfile_signers, "models": self.model_signers,
                   "approvals": self.approval_signers}
        if self.advisories is not None:
            signers["advisories"] = self.advisories.signers
            named += [("advisories.feeds", Path(f)) for f in self.advisories.feeds
                      if not has_scheme(f)]
        named += [(f"{kind} public key", key) for kind, s in signers.items()
                  for key in s.public_keys]
        named += [("gguf_comparisons.record", p) for p in self.gguf_comparison_records]
        named += self.engine_rules.files()
        named += [("engines.omlx.roots", root) for root in self.omlx.roots]
        endpoints = self.difftest.endpoints
        for prompts in (self.difftest.prompts, endpoints.prompts if endpoints else None):
            if prompts:
                named.append(("difftest.prompts", Path(prompts)))
        return named

    def rule(self, tier: TrustTier) -> TierRule:
        return self.tiers[tier]

    @property
    def reviewed_sha256(self) -> frozenset[str]:
        return frozenset(r.sha256 for r in self.reviewed_code)

    @property
    def reviewed_template_sha256(self) -> frozenset[str]:
        return frozenset(r.sha256 for r in self.reviewed_templates)

    @property
    def reviewed_file_sha256(self) -> frozenset[str]:
        return frozenset(r.sha256 for r in self.reviewed_files)

    def upstream_of(self, role: str) -> Upstream | None:
        """The upstream the policy names for `role` (target, drafter), or None."""
        return next((u for u in self.upstream if u.role == role), None)

    def staging_approved(self, repo: str | None, commit: str | None) -> StagingApproval | None:
        return next(
            (s for s in self.staging_approvals if s.repo == repo and s.commit == commit), None
        )

    def gguf_compared(self, repo: str | None, commit: str | None) -> GgufComparison | None:
        return next(
            (g for g in self.gguf_comparisons if g.repo == repo and g.commit == commit), None
        )

    def waiver(self, kind: str, target: str, today: dt.date) -> Waiver | None:
        """The unexpired waiver covering `kind:target`, if any."""
        return next(
            (
                w
                for w in self.waivers
                if w.kind == kind and w.target == target and not w.expired(today)
            ),
            None,
        )

    def expired_waivers(self, today: dt.date) -> list[Waiver]:
        return [w for w in self.waivers if w.expired(today)]

    def to_json(self) -> dict[str, Any]:
        """The effective policy, as loaded (every default filled in), plus source and digest."""
        effective = {"source": self.source, "digest": self.digest, **_jsonable(self.document)}
        for key in OPTIONAL_LISTS:
            effective.setdefault(key, [])
        return effective

    def to_yaml(self) -> str:
        """The effective policy as a policy file that `policy check` accepts unchanged (and the
        gate loads): source and digest as comments, dates unquoted, `extends` resolved."""
        document = {k: v for k, v in self.document.items() if k != "extends"}
        for key in OPTIONAL_LISTS:
            document.setdefault(key, [])
        header = f"# source: {self.source}\n# digest: {self.digest}\n"
        return header + yaml.safe_dump(document, sort_keys=False, width=100)


# --- locating --------------------------------------------------------------------------------


def builtin_policy_path(name: str = "default") -> Path:
    """The path of a shipped policy (`default`, `strict`, `dev`), inside the installed package."""
    if name not in BUILTIN_POLICIES:
        raise InputError(f"no built-in policy {name!r} (built-in: {', '.join(BUILTIN_POLICIES)})")
    resource = importlib.resources.files("dflash_guard") / "policies" / f"{name}.yaml"
    return Path(str(resource))


def resolve_policy(spec: str | Path | None) -> Path:
    """A policy argument as a path. None is the built-in default; `default`, `strict` and `dev`
    always name the built-in policies, even when a file of that name is in the working folder;
    a file is given as a path: a `Path`, or a string containing `/` or ending in `.yaml`/`.yml`
    (`./strict` for a file named `strict`). Anything else is an `InputError`."""
    if spec is None:
        return builtin_policy_path("default")
    if isinstance(spec, Path):
        return spec
    if spec in BUILTIN_POLICIES:
        return builtin_policy_path(spec)
    if "/" in spec or os.sep in spec or spec.endswith((".yaml", ".yml")):
        return Path(spec)
    raise InputError(
        f"--policy {spec!r}: not a built-in policy ({', '.join(BUILTIN_POLICIES)}); "
        f"{_did_you_mean(spec)}give a policy file as a path (./{spec}, or a name ending in .yaml)"
    )


def _did_you_mean(spec: str, folder: Path = Path()) -> str:
    """`did you mean 'strict'? ` for the closest built-in name, or policy file in `folder`
    (its first 1,000 entries), to `spec`; or nothing."""
    candidates = dict.fromkeys(BUILTIN_POLICIES, "")
    with contextlib.suppress(OSError):
        for entry in itertools.islice(folder.iterdir(), 1000):
            if entry.suffix in (".yaml", ".yml"):
                candidates[entry.name] = entry.stem
    spelled = {name: name for name in candidates} | {stem: name for name, stem in
                                                     candidates.items() if stem}
    close = difflib.get_close_matches(Path(spec).name, spelled, n=1, cutoff=0.6)
    if not close:
        return ""
    name = spelled[close[0]]
    return f"did you mean {name if name in BUILTIN_POLICIES else str(folder / name)!r}? "


def is_builtin(policy: Policy) -> bool:
    """Whether `policy` was read from one of the shipped policy files."""
    return any(policy.source == str(builtin_policy_path(name)) for name in BUILTIN_POLICIES)


# --- reading ---------------------------------------------------------------------------------


def _signers(field: Field) -> Signers:
    f = field.mapping(("identities", "public_keys"), ("identities", "public_keys"))
    identities = []
    for item in f["identities"].items():
        i = item.mapping(("identity", "issuer"), ("identity", "issuer"))
        identities.append(Identity(i["identity"].text(), i["issuer"].text(
            lambda v: v.startswith("https://"), "an https:// issuer URL")))
    keys = []
    for item in f["public_keys"].items():
        key = item.path()
        if not key.is_file():
            raise item.fail(f"public key file {key} not found")
        keys.append(key)
    return Signers(tuple(identities), tuple(keys))


def _tier_rule(field: Field) -> TierRule:
    names = ("signature_required", "remote_code", "pickle_allowed", "staging_required")
    f = field.mapping((*names, "templates"), names)
    templates = f.optional("templates")  # absent: reviewed-only (fails closed)
    return TierRule(
        signature_required=f["signature_required"].flag(),
        remote_code=RemoteCode(f["remote_code"].choice(tuple(r.value for r in RemoteCode))),
        pickle_allowed=f["pickle_allowed"].flag(),
        staging_required=f["staging_required"].flag(),
        templates=Templates(templates.choice(tuple(t.value for t in Templates)))
        if templates is not None else Templates.reviewed_only,
    )


def _repo_at_commit(field: Field) -> tuple[str, str]:
    value = field.text(REPO_AT_COMMIT_RE.match, "ORG/NAME@<40-hex commit>")
    repo, commit = value.rsplit("@", 1)
    return repo, commit


def _orgs(field: Field) -> tuple[str, ...]:
    return tuple(item.text(ORG_RE.match, "a Hub organisation name") for item in field.items())


TEAM_ID_RE = re.compile(r"^[A-Z0-9]{10}$")  # an Apple Developer team identifier


def _app_pins(field: Field) -> AppPins:
    """`engines.omlx`: the Apple team that must have signed the image (required), its code
    identifier, and roots (certificate files) trusted instead of Apple's."""
    f = field.mapping(("team_id", "identifier", "roots"), ("team_id",))
    roots = []
    for item in f.entries("roots"):
        path = item.path()
        if not path.is_file():
            raise item.fail(f"root certificate file {path} not found")
        roots.append(path)
    return AppPins(
        team_id=f["team_id"].text(TEAM_ID_RE.match, "an Apple team identifier (10 capitals "
                                  "and digits)"),
        identifier=f["identifier"].text() if "identifier" in f else None,
        roots=tuple(roots))


def _prompt_file(field: Field) -> str | None:
    """`builtin` (or nothing) is None; else a JSONL path relative to the policy, which exists."""
    prompts = field.value()
    if prompts is None or prompts == "builtin":
        return None
    path = field.path()
    if not path.is_file():
        raise field.fail(f"prompt file {path} not found")
    return str(path)


ENDPOINT_FIELDS = ("baseline", "candidate", "model", "api_key_env", "prompts", "max_new_tokens",
                   "max_near_ties", "near_tie_margin", "metrics", "concurrency", "timeout_s")


def _endpoint_rules(field: Field, max_new_tokens: int) -> EndpointRules:
    """`difftest.endpoints`: its URLs may be left to the gate's --baseline and --candidate
    (an empty URL: the gate refuses to start without them; it fails closed)."""
    f = field.mapping(ENDPOINT_FIELDS, ())
    url = "an http(s) URL without credentials"
    defaults = EndpointRules("", "", max_new_tokens=max_new_tokens)

    def get(name: str, kind: type | tuple[type, ...], check: Callable[[Any], Any],
            expect: str) -> Any:
        return f[name].typed(kind, check, expect) if name in f else getattr(defaults, name)

    return EndpointRules(
        baseline=f["baseline"].text(is_http_endpoint, url) if "baseline" in f else "",
        candidate=f["candidate"].text(is_http_endpoint, url) if "candidate" in f else "",
        model=f["model"].text() if "model" in f else None,
        api_key_env=(f["api_key_env"].text(ENV_NAME_RE.match, "an environment variable name")
                     if "api_key_env" in f else None),
        prompts=_prompt_file(f["prompts"]) if "prompts" in f else None,
        max_new_tokens=get("max_new_tokens", int, lambda v: v > 0, "an integer > 0"),
        max_near_ties=get("max_near_ties", int, lambda v: v >= 0, "an integer >= 0"),
        near_tie_margin=float(get("near_tie_margin", (int, float), lambda v: v >= 0,
                                  "a logprob margin in nats >= 0")),
        metrics=f["metrics"].flag() if "metrics" in f else True,
        concurrency=get("concurrency", int, lambda v: v > 0, "an integer > 0"),
        timeout_s=float(get("timeout_s", (int, float), lambda v: v > 0, "seconds > 0")),
    )


ADVISORY_FIELDS = ("feeds", "signers", "allow_unsigned", "fail_on", "max_age_days")


def _advisory_feed(field: Field) -> str:
    """An https:// URL without credentials (normalised), or a file or folder relative to the
    policy. Anything written as a URL is a URL: another scheme is an error, never a path."""
    value = field.text()
    if has_scheme(value):
        try:
            parts = http_endpoint(value, "feed")
        except InputError as error:
            raise field.fail(str(error)) from None
        if parts.scheme != "https":
            raise field.fail("expected an https:// URL without credentials, or a path")
        return parts.geturl()
    path = field.path()
    if not path.exists():
        raise field.fail(f"advisory feed {path} not found")
    return str(path)


def _advisory_rules(field: Field) -> AdvisoryRules:
    """`advisories`: every field required; no feed, or signatures required from nobody, is an
    error (it fails closed)."""
    f = field.mapping(ADVISORY_FIELDS, ADVISORY_FIELDS)
    feeds = tuple(_advisory_feed(item) for item in f["feeds"].items())
    if not feeds:
        raise f["feeds"].fail("names no feed: an audit against nothing never means clean")
    signers = _signers(f["signers"])
    allow_unsigned = f["allow_unsigned"].flag()
    if not allow_unsigned and signers.empty:
        raise f["signers"].fail("allow_unsigned is false but no identity or key is accepted: "
                                "nothing could pass")
    return AdvisoryRules(
        feeds=feeds, signers=signers, allow_unsigned=allow_unsigned,
        fail_on=Severity.parse(f["fail_on"].choice(Severity.names())),
        max_age_days=f["max_age_days"].typed(int, lambda v: v > 0, "a number of days > 0"),
    )


ROLLOUT_FIELDS = ("expected_concurrency", "min_speedup", "requests")


def _rollout_rules(field: Field) -> RolloutRules:
    """`rollout`: the expected concurrency and the minimum speedup are required."""
    f = field.mapping(ROLLOUT_FIELDS, ROLLOUT_FIELDS[:2])
    return RolloutRules(
        expected_concurrency=f["expected_concurrency"].typed(int, lambda v: v > 0,
                                                             "an integer > 0"),
        min_speedup=float(f["min_speedup"].typed((int, float), lambda v: v > 0, "a number > 0")),
        requests=(f["requests"].typed(int, lambda v: v > 0, "an integer > 0")
                  if "requests" in f else None),
    )


# `launch`: the speculation `dflash-guard launch` starts and `launch --check` expects, and each
# engine's resource caps under that engine's own flag names (`--max-num-seqs` is max_num_seqs).
LAUNCH_CAPS = {
    "vllm": ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "gpu_memory_utilization",
             "swap_space", "cpu_offload_gb"),
    "llama.cpp": ("ctx_size", "parallel", "batch_size", "ubatch_size", "threads"),
    "sglang": ("max_running_requests", "context_length", "max_total_tokens",
               "mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs_decode"),
    "ollama": ("num_ctx", "num_batch", "num_thread"),  # Modelfile PARAMETERs
}


CONFINEMENT = ("required", "warn")


@dataclasses.dataclass(frozen=True)
class LaunchRules:
    """The `launch` section: expected speculation and per-engine caps (numbers, maxima)."""

    speculative_method: str | None
    num_speculative_tokens: int | None
    caps: Mapping[str, Mapping[str, int | float]]
    # `launch` starts only from a verified approval record (`--approval RECORD`)
    require_approval: bool = False
    # `launch --exec` where the engine cannot run under its Landlock ruleset: `required`
    # refuses, `warn` runs it unconfined with a warning
    confinement: str = "warn"


def launch_rules(field: Field) -> LaunchRules:
    """`launch`: every part optional; caps are positive numbers under known flag names."""
    f = field.mapping(("speculative_method", "num_speculative_tokens", "require_approval",
                       "confinement", *LAUNCH_CAPS))
    caps = {}
    for engine, names in LAUNCH_CAPS.items():
        if engine in f:
            section = f[engine].mapping(names)
            caps[engine] = {name: section[name].typed(
                (int, float), lambda v: v > 0 and not isinstance(v, bool), "a number > 0")
                for name in section}
    return LaunchRules(
        speculative_method=(f["speculative_method"].text(lambda v: v.isidentifier(), "a name")
                            if "speculative_method" in f else None),
        num_speculative_tokens=(f["num_speculative_tokens"].typed(int, lambda v: v > 0,
                                                                  "an integer > 0")
                                if "num_speculative_tokens" in f else None),
        caps=caps,
        require_approval="require_approval" in f and f["require_approval"].flag(),
        confinement=(f["confinement"].choice(CONFINEMENT) if "confinement" in f else "warn"),
    )


def _model_card_rules(field: Field) -> ModelCardRules:
    """`model_card`: `base_model: target` (the card must name the locked target), `licenses`
    (the allowed ones), `datasets: required`."""
    f = field.mapping(("base_model", "licenses", "datasets"), ())
    return ModelCardRules(
        base_model_is_target=("base_model" in f
                              and f["base_model"].choice(("target", "any")) == "target"),
        licenses=tuple(i.text() for i in f["licenses"].items()) if "licenses" in f else (),
        datasets_required=("datasets" in f
                           and f["datasets"].choice(("required", "optional")) == "required"),
    )


TOP_LEVEL = (
    "policy_version", "name", "description", "orgs", "local_tier", "cache_tier", "tiers",
    "artifacts",
    "engines", "scan", "difftest", "drafter", "signatures", "reviewed_code", "reviewed_templates",
    "reviewed_files", "upstream", "staging_approvals", "gguf_comparisons", "waivers",
    "advisories", "rollout", "launch", "model_card",
)
OPTIONAL_LISTS = ("reviewed_code", "reviewed_templates", "reviewed_files", "staging_approvals",
                  "gguf_comparisons", "waivers")
REQUIRED = (
    "policy_version", "name", "orgs", "local_tier", "tiers", "artifacts", "engines", "scan",
    "difftest", "drafter", "signatures",
)


MAX_EXTENDS_DEPTH = 8  # a chain of policy files extending each other (a cycle ends here)


def parse_policy(text: str, source: str = "<policy>", base: Path | None = None,
                 *, depth: int = 0) -> Policy:
    """Parse and validate policy text; raise `InputError` naming `source`, line and field.
    `extends` names a built-in policy or a policy file (relative to `base`, the file's folder):
    the policy is the file laid over the one it extends (`schema.merged`), so an error names the
    file and line that hold the field, and a path is read from the folder of its own file."""
    top, extends = _policy_document(text, source, base if base is not None else Path("."),
                                    depth)
    return _parse_policy(top, text, source, extends)


def _policy_document(text: str, source: str, base: Path, depth: int
                     ) -> tuple[Field, str | None]:
    """The policy's document, laid over the one it extends, and what it extends."""
    top = read_document(text, source, base)
    if top is None:
        raise InputError(f"{source}: the policy is empty (an empty policy never means allow)")
    own = top.mapping((*TOP_LEVEL, "extends"), ())
    if "extends" not in own:
        return top, None
    spec = own["extends"].text()
    return merged(_base_document(own["extends"], base, depth), top), spec


def _base_document(field: Field, base: Path, depth: int) -> Field:
    """The document of what `extends` names: a built-in, or a policy file relative to `base`
    (validated with its own lines first)."""
    spec = field.text()
    if spec in BUILTIN_POLICIES:
        path = builtin_policy_path(spec)
        builtin = read_document(read_input_text(path, "policy", POLICY_MAX_BYTES), spec,
                                path.parent)
        assert builtin is not None
        return builtin
    if not spec.endswith((".yaml", ".yml", ".json")) and "/" not in spec:
        raise field.fail(f"expected one of {', '.join(BUILTIN_POLICIES)} or a policy file "
                         f"(./base.yaml), got {spec!r}")
    if depth >= MAX_EXTENDS_DEPTH:
        raise field.fail(f"more than {MAX_EXTENDS_DEPTH} policies extend each other (a cycle?)")
    path = base / Path(spec).expanduser()
    if not path.is_file():
        raise field.fail(f"{spec}: no such policy file (relative to {base})")
    text = read_input_text(path, "policy", POLICY_MAX_BYTES)
    parent, extends = _policy_document(text, str(path), path.parent, depth + 1)
    _parse_policy(parent, text, str(path), extends)  # the base is valid on its own
    return parent


def _parse_policy(top: Field, text: str, source: str, extends: str | None) -> Policy:
    """The policy of a document with `extends` resolved (see `parse_policy`)."""
    f = top.mapping((*TOP_LEVEL, "extends"), REQUIRED)

    name = f["name"].text()
    version = f["policy_version"].typed(int)
    if version != POLICY_VERSION:
        raise f["policy_version"].fail(f"unsupported version {version} (this tool reads 1)")

    orgs = f["orgs"].mapping(("official", "community"), ("official", "community"))
    tiers_f = f["tiers"].mapping(TIERS, TIERS)
    artifacts = f["artifacts"].mapping(
        ("require_full_sha", "gguf_requires_comparison"),
        ("require_full_sha", "gguf_requires_comparison"),
    )
    engines = f["engines"].mapping(
        ("allow_pr_head", "require_release", "require_pinned", "repositories", "omlx"),
        ("allow_pr_head", "require_release")
    )
    scan = f["scan"].mapping(("fail_on", "target_finite"), ("fail_on",))
    difftest_names = ("prompts", "max_new_tokens", "near_tie_allowance", "min_tau")
    difftest = f["difftest"].mapping((*difftest_names, "endpoints", "max_logprob_delta"),
                                     difftest_names)
    drafter = f["drafter"].mapping(("max_params",), ("max_params",))
    sig_names = ("lockfile_required", "lockfile", "models", "approvals")
    sigs = f["signatures"].mapping(sig_names, sig_names)

    max_new_tokens = difftest["max_new_tokens"].typed(int, lambda v: v > 0, "an integer > 0")
    rules = DifftestRules(
        prompts=_prompt_file(difftest["prompts"]),
        max_new_tokens=max_new_tokens,
        near_tie_allowance=float(difftest["near_tie_allowance"].typed(
            (int, float), lambda v: v >= 0, "a logit margin >= 0"
        )),
        min_tau=float(difftest["min_tau"].typed((int, float), lambda v: v >= 1, "a number >= 1")),
        endpoints=(_endpoint_rules(difftest["endpoints"], max_new_tokens)
                   if "endpoints" in difftest else None),
        max_logprob_delta=(float(difftest["max_logprob_delta"].typed(
            (int, float), lambda v: 0 <= v < math.inf, "a finite number of nats >= 0"))
            if "max_logprob_delta" in difftest else None),
    )

    tiers = {TrustTier(name): _tier_rule(tiers_f[name]) for name in TIERS}
    lockfile_signers = _signers(sigs["lockfile"])
    model_signers = _signers(sigs["models"])
    approval_signers = _signers(sigs["approvals"])
    lockfile_required = sigs["lockfile_required"].flag()
    needs_models = [t for t, r in tiers.items() if r.signature_required]
    unsatisfiable = []
    if lockfile_required and lockfile_signers.empty:
        unsatisfiable.append("signatures.lockfile_required is true but it names no lockfile "
                             "signer (identities or public_keys): nothing could pass")
    if needs_models and model_signers.empty:
        unsatisfiable.append(f"tier {needs_models[0]} requires model signatures but "
                             "signatures.models names no signer: nothing could pass")

    reviewed = []
    for item in f["reviewed_code"].items() if "reviewed_code" in f else []:
        r = item.mapping(("sha256", "path", "reviewer", "date"), ("sha256", "path", "reviewer",
                                                                  "date"))
        reviewed.append(ReviewedCode(r["sha256"].text(SHA256_RE.match, "a 64-hex sha256"),
                                     r["path"].text(), r["reviewer"].text(), r["date"].date()))
    templates = []
    for item in f["reviewed_templates"].items() if "reviewed_templates" in f else []:
        t = item.mapping(("sha256", "note"), ("sha256", "note"))
        templates.append(ReviewedTemplate(t["sha256"].text(SHA256_RE.match, "a 64-hex sha256"),
                                          t["note"].text()))
    files = []
    for item in f["reviewed_files"].items() if "reviewed_files" in f else []:
        r = item.mapping(("sha256", "note"), ("sha256", "note"))
        files.append(ReviewedFile(r["sha256"].text(SHA256_RE.match, "a 64-hex sha256"),
                                  r["note"].text()))
    upstream = []
    if (named := f.optional("upstream")) is not None:
        for role, field in named.mapping(UPSTREAM_ROLES).items():
            upstream.append(Upstream(role, *_repo_at_commit(field)))
    staging = []
    for item in f["staging_approvals"].items() if "staging_approvals" in f else []:
        s = item.mapping(("artifact", "approver", "date"), ("artifact", "approver", "date"))
        repo, commit = _repo_at_commit(s["artifact"])
        staging.append(StagingApproval(repo, commit, s["approver"].text(), s["date"].date()))
    comparisons, records = [], []
    for item in f["gguf_comparisons"].items() if "gguf_comparisons" in f else []:
        if isinstance(item.value(), dict) and "record" in item.value():
            record = item.mapping(("record",), ("record",))["record"]
            path = record.path()
            if not path.is_file():
                raise record.fail(f"GGUF comparison record {path} not found")
            records.append(path)
            continue
        names = ("artifact", "compared_with", "approver", "date")
        g = item.mapping(names, names)
        repo, commit = _repo_at_commit(g["artifact"])
        comparisons.append(GgufComparison(repo, commit, g["compared_with"].text(),
                                          g["approver"].text(), g["date"].date()))
    waivers = []
    for item in f["waivers"].items() if "waivers" in f else []:
        waiver_names = ("id", "covers", "reason", "owner", "expires")
        w = item.mapping(waiver_names, waiver_names)
        covers = w["covers"].text(
            lambda v: ":" in v and v.split(":", 1)[0] in WAIVER_KINDS and v.split(":", 1)[1],
            f"KIND:TARGET with KIND one of {', '.join(WAIVER_KINDS)}",
        )
        kind, target = covers.split(":", 1)
        waivers.append(Waiver(w["id"].text(), WaiverKind(kind), target, w["reason"].text(),
                              w["owner"].text(), w["expires"].date()))
    ids = [w.id for w in waivers]
    if len(set(ids)) != len(ids):
        raise f["waivers"].fail("a waiver id appears more than once")

    raw = top.value()
    return Policy(
        source=source,
        digest="sha256:" + hashlib.sha256(text.encode()).hexdigest(),
        name=name,
        official_orgs=_orgs(orgs["official"]),
        community_orgs=_orgs(orgs["community"]),
        local_tier=TrustTier(f["local_tier"].choice(TIERS)),
        cache_tier=(TrustTier(cached.choice(TIERS))
                    if (cached := f.optional("cache_tier")) is not None else TrustTier.unknown),
        tiers=tiers,
        require_full_sha=artifacts["require_full_sha"].flag(),
        gguf_requires_comparison=artifacts["gguf_requires_comparison"].flag(),
        allow_pr_head=engines["allow_pr_head"].flag(),
        require_release=engines["require_release"].flag(),
        require_engine="require_pinned" in engines and engines["require_pinned"].flag(),
        engine_rules=parse_engine_rules(engines.optional("repositories")),
        omlx=_app_pins(engines["omlx"]) if "omlx" in engines else AppPins(),
        fail_on=Severity.parse(scan["fail_on"].choice(Severity.names())),
        target_finite="target_finite" in scan and scan["target_finite"].flag(),
        difftest=rules,
        drafter_max_params=drafter["max_params"].typed(int, lambda v: v > 0, "an integer > 0"),
        lockfile_signature_required=lockfile_required,
        lockfile_signers=lockfile_signers,
        model_signers=model_signers,
        approval_signers=approval_signers,
        reviewed_code=tuple(reviewed),
        reviewed_templates=tuple(templates),
        reviewed_files=tuple(files),
        upstream=tuple(upstream),
        staging_approvals=tuple(staging),
        gguf_comparisons=tuple(comparisons),
        waivers=tuple(waivers),
        document=raw,
        gguf_comparison_records=tuple(records),
        advisories=_advisory_rules(f["advisories"]) if "advisories" in f else None,
        rollout=_rollout_rules(f["rollout"]) if "rollout" in f else None,
        launch=launch_rules(f["launch"]) if "launch" in f else None,
        unsatisfiable=tuple(unsatisfiable),
        extends=extends,
        model_card=(_model_card_rules(f["model_card"]) if "model_card" in f
                    else ModelCardRules()),
    )


POLICY_MAX_BYTES = 4 * 1024 * 1024  # a policy is a few KB; long review lists stay far below


@dataclasses.dataclass(frozen=True)
class PolicyCheck:
    """`policy check`'s report: the policy loaded (it is valid, or loading raised) and the
    waivers that have expired (the gate refuses on those)."""

    policy: Policy
    expired: list[Waiver]

    @property
    def passed(self) -> bool:
        """Exit 0 only for a policy the gate could pass: no waiver expired, and no requirement
        nothing could meet (`unsatisfiable`: a signature required and no signer named)."""
        return not self.expired and not self.policy.unsatisfiable

    def to_json(self) -> dict[str, object]:
        policy = self.policy
        return {
            "source": policy.source,
            "name": policy.name,
            "digest": policy.digest,
            "passed": self.passed,
            "unsatisfiable": list(policy.unsatisfiable),
            "expired_waivers": [{"id": w.id, "covers": w.covers, "expires": w.expires.isoformat()}
                                for w in self.expired],
        }


def load_policy(path: str | Path | None = None) -> Policy:
    """Read and validate a policy file (None: the built-in default); `InputError` when bad."""
    resolved = resolve_policy(path)
    if not resolved.exists() and (hint := _did_you_mean(resolved.name, resolved.parent)):
        raise InputError(f"--policy {str(path)!r}: no such file; {hint.rstrip()}")
    text = read_input_text(resolved, "policy", POLICY_MAX_BYTES)
    return parse_policy(text, str(resolved), base=resolved.parent)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    return value
