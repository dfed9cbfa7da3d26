"""The audit's rule ids and descriptions: the one place they are spelled (as in `scan.rules`)."""

from __future__ import annotations

RULE_AFFECTED = "DG-ADV-AFFECTED"
RULE_UNKNOWN = "DG-ADV-UNKNOWN"
RULE_FEED = "DG-ADV-FEED"

RULES: dict[str, str] = {
    RULE_AFFECTED: "A locked engine commit, Hub revision or package version is affected by an "
                   "OSV advisory.",
    RULE_UNKNOWN: "An advisory range over a locked subject could not be decided (a GIT range "
                  "without a local clone): never reported as clean.",
    RULE_FEED: "An advisory feed is refused: a signature that fails, unsigned where signatures "
               "are required, or older than the maximum age.",
}
