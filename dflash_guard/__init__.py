"""dflash-guard: lock, scan, verify, diff-test and gate DFlash speculative-decoding deploys."""

__version__ = "0.1.0"
