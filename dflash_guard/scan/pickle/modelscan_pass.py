"""modelscan's denylist verdict on one file, as findings next to our own allowlist pass.

modelscan picks formats by extension only (`MODELSCAN_SUFFIXES`) and reports both what it flags
and what it could not scan; a crash inside it becomes a low finding, never a hidden pass.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.severity import Severity


def modelscan_findings(path: Path, display: str) -> list[Finding]:
    """modelscan's denylist verdict on one file (it picks formats by extension only)."""
    from modelscan.modelscan import ModelScan
    from modelscan.settings import DEFAULT_SETTINGS

    # modelscan logs every error it also returns; without a handler they would reach stderr.
    logging.getLogger("modelscan").setLevel(logging.CRITICAL)
    try:
        report = ModelScan(settings=DEFAULT_SETTINGS).scan(path)
    except Exception as error:  # noqa: BLE001 - a crash in modelscan must not hide our own pass
        return [
            Finding(
                rules.MODELSCAN_ERROR.id,
                Severity.low,
                display,
                f"modelscan failed: {type(error).__name__}: {error}",
                detector="modelscan",
            )
        ]
    findings = []
    for issue in report.get("issues", []):
        source = str(issue.get("source", ""))
        member = source.split(":", 1)[1] if ":" in source else None
        severity = Severity.parse(str(issue.get("severity", "high")))
        findings.append(
            Finding(
                rules.MODELSCAN.id,
                severity,
                display,
                f"modelscan: unsafe operator {issue.get('module')}.{issue.get('operator')}",
                member=member,
                detector="modelscan",
            )
        )
    for problem in report.get("errors", []):
        findings.append(
            Finding(
                rules.MODELSCAN_ERROR.id,
                Severity.low,
                display,
                f"modelscan could not scan it ({problem.get('description')}); the opcode pass did",
                detector="modelscan",
            )
        )
    return findings


MODELSCAN_SUFFIXES = frozenset(
    {
        ".pkl",
        ".pickle",
        ".joblib",
        ".dill",
        ".dat",
        ".data",
        ".bin",
        ".pt",
        ".pth",
        ".ckpt",
        ".npy",
        ".zip",
        ".npz",
    }
)
