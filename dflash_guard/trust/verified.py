"""`verify`'s report: the byte-for-byte check of a lock's folders and its signatures together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_guard.pins.verify import VerifyReport
from dflash_guard.trust.signing import SignatureCheck


@dataclass(frozen=True)
class VerifiedLock:
    """Every locked file compared, and every signature checked: `passed` when all hold."""

    lockfile: str
    digest: str
    report: VerifyReport
    signatures: tuple[SignatureCheck, ...]

    @property
    def passed(self) -> bool:
        return self.report.passed and all(check.ok for check in self.signatures)

    def to_json(self) -> dict[str, Any]:
        return {"lockfile": self.lockfile, "digest": self.digest, **self.report.to_json(),
                "passed": self.passed,
                "signatures": [check.to_json() for check in self.signatures]}
