"""The shapes of the identifiers the tool pins, defined once: a Hub repo, a commit, a sha256.

Lockfiles, policies, the hub client, `lock` and the gate all match against these.
"""

from __future__ import annotations

import re

ORG = r"[A-Za-z0-9][\w.\-]*"
REPO = ORG + r"/[\w.\-]+"  # ORG/NAME, as the Hub spells a repo id

ORG_RE = re.compile(rf"^{ORG}\Z")
REPO_RE = re.compile(rf"^{REPO}\Z")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")  # a full git commit (or git blob id)
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# `ORG/NAME@REV` on the command line; `ORG/NAME@<40-hex commit>` in a policy's records.
REPO_AT_REV_RE = re.compile(rf"^(?P<repo>{REPO})(?:@(?P<rev>[^\s@]+))?\Z")
REPO_AT_COMMIT_RE = re.compile(rf"^(?P<repo>{REPO})@(?P<commit>[0-9a-f]{{40}})\Z")
