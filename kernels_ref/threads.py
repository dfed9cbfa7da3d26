"""How many intra-op threads the reference runner decodes with.

Decoding runs one small forward per step: for a tiny model each forward is microseconds of
arithmetic, and handing it to several threads costs more than it saves (on a busy machine the
other threads also wait for cores, which made the built-in pair 13x slower). A large model's
matrix-vector products are worth splitting, on cores nobody else is using. `choose_threads`
picks from the model's parameter count and the cores this process may run on
(`os.sched_getaffinity`, which a container's or `taskset`'s limit narrows) less those the
machine's load keeps busy (the 1-minute load average; a 47M-parameter pair ran 4x slower on 2
threads than on 1 on a loaded 2-core machine); an explicit count always wins. `using_threads`
applies a choice to torch for the length of a block and restores the previous count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

# Below this many parameters (target + drafter) one thread decodes fastest: the built-in pair
# has about 0.1M. Above it, one thread per PARAMS_PER_THREAD parameters, up to the usable cores.
SINGLE_THREAD_PARAMS = 20_000_000
PARAMS_PER_THREAD = 20_000_000


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count decoding runs on, and why (both go into reports)."""

    threads: int
    reason: str

    def to_json(self) -> dict[str, int | str]:
        return {"threads": self.threads, "reason": self.reason}


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def idle_cores(cores: int, load: float) -> int:
    """Of `cores` usable CPUs, those the load average `load` leaves free (this process counts
    as one of the load: it is running), at least 1."""
    return max(1, min(cores, cores + 1 - round(load)))


def choose_threads(
    parameters: int,
    *,
    cores: int | None = None,
    load: float | None = None,
    requested: int | None = None,
) -> ThreadChoice:
    """The thread count for decoding a model of `parameters` parameters on `cores` usable CPUs
    (default: `usable_cores()`) under the load average `load` (default: the last minute's);
    `requested` (`--threads N`, at least 1) overrides the policy."""
    if requested is not None:
        if requested < 1:
            raise ValueError("threads must be at least 1")
        return ThreadChoice(requested, f"--threads {requested}")
    cores = usable_cores() if cores is None else max(1, cores)
    load = os.getloadavg()[0] if load is None else load
    millions = f"{parameters / 1e6:.1f}M parameters"
    if parameters < SINGLE_THREAD_PARAMS:
        why = f"below {SINGLE_THREAD_PARAMS // 10**6}M"
        return ThreadChoice(1, f"auto: {millions}, {why}: one thread")
    free = idle_cores(cores, load)
    threads = min(free, parameters // PARAMS_PER_THREAD)
    return ThreadChoice(threads, f"auto: {millions}, {cores} usable cores, load {load:.1f} "
                                 f"leaves {free}: {threads} thread{'s' if threads > 1 else ''}")


def count_parameters(*models: torch.nn.Module | object) -> int:
    """Parameters of the given modules (anything that is not a torch module counts 0)."""
    return sum(p.numel() for m in models if isinstance(m, torch.nn.Module)
               for p in m.parameters())


@contextmanager
def using_threads(choice: ThreadChoice) -> Iterator[ThreadChoice]:
    """Run the block on `choice.threads` torch intra-op threads, then restore the count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(choice.threads)
    try:
        yield choice
    finally:
        torch.set_num_threads(previous)
