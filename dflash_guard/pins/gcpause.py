"""Pausing Python's cyclic garbage collector over bulk work of many small objects.

A 100k-file lock or verify makes a million small objects (paths, stat results, keys, rows), none
of them in a reference cycle: reference counting frees every one. Each allocation still counts
towards the collector's thresholds, and its full collections walk every live object again:
0.15 to 0.25 s of a 100k-file `lock`. `paused_gc` turns the collector off for the work and back
on (only if it was on) after it; anything cyclic made meanwhile is collected then.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state before it is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
