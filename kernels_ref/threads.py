"""How many intra-op threads the reference runner decodes with.

Decoding runs one small forward per step: for a tiny model each forward is microseconds of
arithmetic, and handing it to several threads costs more than it saves (on a busy machine the
other threads also wait for cores, which made the built-in pair 13x slower). A large model's
matrix-vector products are worth splitting, on cores nobody else is using. `choose_threads`
picks from the model's parameter count and the cores this process may run on (its affinity
mask, which a container's CPU set or `taskset` narrows, capped by its cgroups' CPU quotas)
less those other work keeps busy right now: the CPU time those cores spent busy over a short
sample of `/proc/stat`, taken while this process sleeps. (The one-minute load average, which
this used before, lags: a neighbour started seconds earlier was invisible to it, and two
threads beside it decoded a 47M-parameter pair 2.95x slower than one.) An explicit count
always wins. `using_threads` applies a choice to torch for the length of a block and restores
the count.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch

# Below this many parameters (target + drafter) one thread decodes fastest: the built-in pair
# has about 0.1M. Above it, one thread per PARAMS_PER_THREAD parameters, up to the free cores.
SINGLE_THREAD_PARAMS = 20_000_000
PARAMS_PER_THREAD = 20_000_000

STAT = Path("/proc/stat")
SAMPLE_SECONDS = 0.1
# A core counts as taken once other work keeps it busy a quarter of the time: torch's threads
# wait for each other at every operation, so a part-time neighbour still stalls all of them.
TAKEN_FROM = 0.25
CGROUP = Path("/sys/fs/cgroup")
OWN_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count decoding runs on, and why (both go into reports)."""

    threads: int
    reason: str

    def to_json(self) -> dict[str, int | str]:
        return {"threads": self.threads, "reason": self.reason}


def cgroup_quota(folder: Path) -> float | None:
    """The CPU quota one cgroup folder sets, in cores (v2 `cpu.max`, v1 `cpu.cfs_quota_us` over
    `cpu.cfs_period_us`); None for no quota ("max", -1) or nothing readable."""
    try:
        if (folder / "cpu.max").is_file():
            quota, period = (folder / "cpu.max").read_text().split()[:2]
        else:
            quota = (folder / "cpu.cfs_quota_us").read_text()
            period = (folder / "cpu.cfs_period_us").read_text()
        cores = int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return cores if cores > 0 else None


def quota_cores(root: Path = CGROUP, own: Path = OWN_CGROUP) -> int | None:
    """The tightest CPU quota on this process's cgroup and its ancestors (as /proc/self/cgroup
    names them under `root`, v2 or v1's `cpu` hierarchy; in a container, its own), in whole
    cores rounded up; None when none is set or none can be read."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    folders = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        relative = PurePosixPath(path.strip().lstrip("/"))
        if (controllers and "cpu" not in controllers.split(",")) or ".." in relative.parts:
            continue  # not the cpu hierarchy, or above the namespace's root (not ours to read)
        mount = root if not controllers else root / "cpu"
        folders += [mount / part for part in (relative, *relative.parents)]
    quotas = [quota for folder in folders if (quota := cgroup_quota(folder)) is not None]
    return max(1, math.ceil(min(quotas))) if quotas else None


def affinity_cores() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def usable_cores() -> int:
    """The CPUs this process may use at once: its affinity mask, capped by its cgroup's quota."""
    cores, quota = affinity_cores(), quota_cores()
    return cores if quota is None else min(cores, quota)


def cpu_times(stat: str, cpus: set[int]) -> tuple[int, int]:
    """(busy, total) clock ticks of `cpus` in the text of /proc/stat; idle and iowait are idle.
    Raises ValueError when a CPU of `cpus` has no line."""
    busy = total = 0
    seen = set()
    for line in stat.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        ticks = [int(field) for field in fields[:8]]  # guest time is already in user time
        seen.add(int(name[3:]))
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    if seen != cpus:
        raise ValueError(f"no /proc/stat line for CPUs {sorted(cpus - seen)}")
    return busy, total


def busy_cores(seconds: float = SAMPLE_SECONDS) -> float:
    """How many of this process's CPUs other work kept busy over the next `seconds`, in cores:
    their busy time in /proc/stat less this process's own CPU time (torch's idle threads may
    still spin). Where /proc/stat cannot be read or lacks one of them (not Linux; lxcfs), the
    one-minute load average less this process; where neither can, none."""
    try:
        cpus = os.sched_getaffinity(0)
        before, own = cpu_times(STAT.read_text(), cpus), time.process_time()
        time.sleep(seconds)
        after, own = cpu_times(STAT.read_text(), cpus), time.process_time() - own
    except (AttributeError, OSError, ValueError):
        try:
            return max(0.0, os.getloadavg()[0] - 1)
        except (AttributeError, OSError):  # no load average either (Windows)
            return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    busy, total = (after[0] - before[0]) / tick - own, (after[1] - before[1]) / tick
    return max(0.0, len(cpus) * busy / total) if total > 0 else 0.0


def free_cores(cpus: int, busy: float) -> int:
    """Of `cpus` CPUs, those other work keeping `busy` of them busy leaves free, at least 1; a
    CPU counts as taken from a quarter of its time."""
    return max(1, cpus - max(0, math.ceil(busy - TAKEN_FROM)))


def choose_threads(
    parameters: int,
    *,
    cores: int | None = None,
    busy: float | None = None,
    requested: int | None = None,
) -> ThreadChoice:
    """The thread count for decoding a model of `parameters` parameters on `cores` CPUs
    (default: the affinity mask, and the cgroup's quota caps the count) while other work keeps
    `busy` of those CPUs busy (default: sampled now, only when more than one thread is in
    question); `requested` (`--threads N`, at least 1) overrides the policy."""
    if requested is not None:
        if requested < 1:
            raise ValueError("threads must be at least 1")
        return ThreadChoice(requested, f"--threads {requested}")
    if cores is None:
        cpus, usable = affinity_cores(), usable_cores()
    else:
        cpus = usable = max(1, cores)
    millions = f"{parameters / 1e6:.1f}M parameters"
    if parameters < SINGLE_THREAD_PARAMS:
        why = f"below {SINGLE_THREAD_PARAMS // 10**6}M"
        return ThreadChoice(1, f"auto: {millions}, {why}: one thread")
    wanted = min(usable, parameters // PARAMS_PER_THREAD)
    if wanted == 1:
        why = "1 usable core" if usable == 1 else f"one per {PARAMS_PER_THREAD // 10**6}M"
        return ThreadChoice(1, f"auto: {millions}, {why}: one thread")
    busy = busy_cores() if busy is None else busy
    free = free_cores(cpus, busy)
    threads = min(wanted, free)
    return ThreadChoice(threads, f"auto: {millions}, {usable} usable cores, {busy:.1f} of "
                                 f"{cpus} CPUs busy now leaves {free}: "
                                 f"{threads} thread{'s' if threads > 1 else ''}")


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
