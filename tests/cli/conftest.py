"""The CLI tests use the fixtures of the rooms whose commands they run (re-exported here)."""

from tests.pins.conftest import hf_env, hub, local_pair  # noqa: F401  (fixtures)
from tests.scan.conftest import benign_modeling  # noqa: F401  (fixture)
