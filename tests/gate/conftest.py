"""The gate tests share the trust tests' fixtures (the locked built-in pair, a signing key pair)."""

from tests.trust.conftest import key_pair, pair  # noqa: F401  (fixtures, re-exported)
