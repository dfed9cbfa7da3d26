"""The rollout gate tests share the trust tests' locked built-in pair."""

from tests.trust.conftest import pair  # noqa: F401  (a fixture, re-exported)
