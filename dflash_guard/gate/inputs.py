"""What a gate run is told (`GateOptions`) and what each check reads (`GateInputs`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from dflash_guard.gate.evidence import Evidence, LockEvidence, SignatureEvidence
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.trust.judge import Judge
from dflash_guard.trust.policy import EndpointRules, Policy, Signers
from kernels_ref.faults import Fault  # torch-free

E = TypeVar("E")


@dataclasses.dataclass(frozen=True)
class ApprovalSigning:
    """How the approval record is signed: Sigstore (keyless), an ECDSA key (PEM), or not."""

    sigstore: bool = False
    key: Path | None = None
    interactive: bool = False  # the Sigstore login may open a browser
    passphrase: Callable[[], str] | None = None  # an encrypted key's, asked only when needed

    @property
    def wanted(self) -> bool:
        return self.sigstore or self.key is not None


@dataclasses.dataclass(frozen=True)
class EndpointOverrides:
    """Endpoint URLs given at gate time: they override the policy's (both: run the endpoint
    diff under a policy that names none)."""

    baseline: str | None = None
    candidate: str | None = None
    api_key_env: str | None = None  # the operator's `--api-key-env`: the only key ever sent


@dataclasses.dataclass(frozen=True)
class GateOptions:
    """Everything a gate run is told: what to gate, under which policy, and what to write."""

    lock_path: Path
    policy: str | Path | None = None  # a file or a built-in name; None: the built-in default
    roots: Mapping[str, Path] = dataclasses.field(default_factory=dict)  # role -> folder
    out: Path | None = None  # the approval record, written only on approval
    signing: ApprovalSigning = ApprovalSigning()
    trust_root: Path | None = None  # Sigstore trusted root: verify offline
    lock_bundle: Path | None = None  # --bundle: the lockfile signature to check, by name
    download: bool = False  # fetch artifacts missing from the HF cache at the pinned commit
    device: str = "cpu"
    inject: Fault | None = None  # a planted difftest fault (demonstrations)
    threads: int | None = None  # difftest torch CPU threads; None: kernels_ref's thread policy
    endpoints: EndpointOverrides = EndpointOverrides()
    engine_repos: Mapping[str, Path] = dataclasses.field(default_factory=dict)  # advisory audit:
    # a locked engine (or Hub repo) -> a local git clone, so GIT ranges are decided over it
    today: dt.date | None = None  # None: today (UTC); waivers expire against it
    signers: Signers = Signers((), ())  # accepted beside the policy's (--public-key, --identity)


@dataclasses.dataclass(frozen=True)
class LockRead:
    """The lockfile as the gate read it, once, before the first check: its bytes and their
    sha256 (the record's subject), and a private copy of exactly those bytes, with copies of its
    signatures read at the same time, for the readers that take a path (signature checks, the
    advisory audit). A lock swapped on disk during the run is not what the checks judge."""

    path: Path  # as given (`--lock`): its name is the record's subject name
    data: bytes
    sha256: str
    copy: Path


@dataclasses.dataclass(frozen=True)
class GateInputs:
    """What every check reads: the run's options, the loaded policy, the resolved endpoints and
    their engines, and the evidence of the checks that passed before it (in run order)."""

    options: GateOptions
    policy: Policy
    today: dt.date
    lock_read: LockRead
    endpoints: EndpointRules | None = None
    engines: tuple[EngineEndpoint, EngineEndpoint] | None = None
    found: tuple[Evidence, ...] = ()
    progress: Progress = dataclasses.field(default=NO_PROGRESS, compare=False, repr=False)

    def get(self, kind: type[E]) -> E:
        """The evidence of type `kind` an earlier check found (the run order guarantees it)."""
        for evidence in self.found:
            if isinstance(evidence, kind):
                return evidence
        raise AssertionError(f"no {kind.__name__} yet: a check ran out of order")

    @property
    def lock(self) -> Lockfile:
        return self.get(LockEvidence).lock

    @property
    def waivers_used(self) -> tuple[str, ...]:
        """Every waiver the checks so far used, once each, in the order first used."""
        used = (w for e in self.found for w in getattr(e, "waivers", ()))
        return tuple(dict.fromkeys(used))

    def judge(self) -> Judge:
        """The policy's judge for one check (it collects the waivers that check uses); a Hub
        provenance claim counts only when the lockfile signature check proved its signer."""
        trusted = any(isinstance(e, SignatureEvidence) and e.provenance_trusted
                      for e in self.found)
        return Judge(self.policy, self.today, trusted)
