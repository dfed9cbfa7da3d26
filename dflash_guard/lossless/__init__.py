"""Losslessness: greedy and sampled diff tests through kernels_ref, and diffs of live endpoints."""
