"""What each gate check proved, as the approval record carries it: one frozen section per check.

A check that passes returns its evidence beside its `Outcome`; the record writes the sections in
the order the checks ran (`record.approval_statement`), each under its check's key. A section
holds facts the gate computed or read from a report it produced in this run, never a field of a
file the user was handed. Later checks read what earlier ones found by type (`GateInputs.get`),
so a misspelled section is a type error, not a key that silently misses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dflash_guard.pins.lockfile import Lockfile

JSON = dict[str, object]


class Evidence(Protocol):
    """A check's section of the approval record."""

    def to_json(self) -> JSON:
        """The section as written into the record: snake_case, facts only."""
        ...


@dataclasses.dataclass(frozen=True)
class LockEvidence:
    """The lockfile loaded and its pins checked."""

    lock: Lockfile

    def to_json(self) -> JSON:
        return {"content_digest": self.lock.digest(), "artifacts": len(self.lock.artifacts),
                "engines": len(self.lock.engines)}


@dataclasses.dataclass(frozen=True)
class SignatureEvidence:
    """Who signed the lockfile, and so whether its Hub provenance claims count."""

    signers: tuple[str, ...]
    provenance_trusted: bool

    def to_json(self) -> JSON:
        return {"signed_by": list(self.signers), "provenance_trusted": self.provenance_trusted}


@dataclasses.dataclass(frozen=True)
class VerifiedFiles:
    """Every locked file hashed in this run: where each role was found, and the digests
    (`ROLE/PATH` -> sha256) that become the record's subjects."""

    locations: Mapping[str, Path]
    digests: Mapping[str, str]

    def to_json(self) -> JSON:
        return {"files": len(self.digests)}  # the digests themselves are the subjects


@dataclasses.dataclass(frozen=True)
class ScanEvidence:
    """The scan of the verified folders: totals, each role's counts, and the waivers it used."""

    fail_on: str
    findings: int
    failing: int
    remote_code: int
    pickle_files: int
    roles: Mapping[str, JSON]  # each role's `ScanReport.record_section`
    waivers: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {"fail_on": self.fail_on, "findings": self.findings, "failing": self.failing,
                "remote_code": self.remote_code, "pickle_files": self.pickle_files,
                "roles": dict(self.roles)}


@dataclasses.dataclass(frozen=True)
class PolicyEvidence:
    """The policy's rules on the lock held: each role's tier, and the waivers used for them."""

    tiers: Mapping[str, str]
    waivers: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {"tiers": dict(self.tiers), "waivers": list(self.waivers)}


@dataclasses.dataclass(frozen=True)
class AdvisoryEvidence:
    """The advisory audit: its report's section (feeds by digest, signers, ids found)."""

    audit: JSON

    def to_json(self) -> JSON:
        return dict(self.audit)


@dataclasses.dataclass(frozen=True)
class ModelSignatureEvidence:
    """The model signatures that verified (`ROLE by SIGNER`)."""

    signed: tuple[str, ...]

    def to_json(self) -> JSON:
        return {"signed": list(self.signed)}


@dataclasses.dataclass(frozen=True)
class DifftestEvidence:
    """The local greedy diff: its report's section and the policy's bounds it was held to."""

    diff: JSON
    acceptance_length: float
    max_new_tokens: int
    min_tau: float
    near_ties: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {**self.diff, "acceptance_length": self.acceptance_length,
                "max_new_tokens": self.max_new_tokens, "min_tau": self.min_tau,
                "near_ties": list(self.near_ties)}


@dataclasses.dataclass(frozen=True)
class EndpointEvidence:
    """The live-engine diff: its report's section (URLs, never a key) and the policy's bounds."""

    diff: JSON
    model: str | None
    max_new_tokens: int
    max_near_ties: int
    near_tie_margin: float

    def to_json(self) -> JSON:
        return {**self.diff, "model": self.model, "max_new_tokens": self.max_new_tokens,
                "max_near_ties": self.max_near_ties, "near_tie_margin": self.near_tie_margin}


@dataclasses.dataclass(frozen=True)
class ReferenceEvidence:
    """The candidate engine against kernels_ref on the locked target: its report's summary
    (verdict, divergences, the largest logprob difference and the tolerance it was held to)."""

    diff: JSON

    def to_json(self) -> JSON:
        return dict(self.diff)


@dataclasses.dataclass(frozen=True)
class RolloutEvidence:
    """The concurrency benchmark at the policy's expected load."""

    expected_concurrency: int
    min_speedup: float
    measured: JSON  # the bench report's row for that concurrency

    def to_json(self) -> JSON:
        return {"expected_concurrency": self.expected_concurrency,
                "min_speedup": self.min_speedup, **self.measured}
