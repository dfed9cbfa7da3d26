"""The thread policy: a tiny model decodes on one thread, a large one on the free cores."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernels_ref import threads as policy
from kernels_ref.threads import (
    PARAMS_PER_THREAD,
    SINGLE_THREAD_PARAMS,
    ThreadChoice,
    busy_cores,
    choose_threads,
    count_parameters,
    cpu_times,
    quota_cores,
    usable_cores,
    using_threads,
)

# /proc/stat as Linux writes it: user nice system idle iowait irq softirq steal guest guest_nice.
STAT = """cpu  300 0 100 500 100 0 0 0 0 0
cpu0 100 0 50 200 50 0 0 0 7 0
cpu1 200 0 50 300 50 0 0 0 0 0
intr 7360495 0 0
"""


@pytest.mark.parametrize(
    ("parameters", "cores", "busy", "threads"),
    [
        (100_000, 16, 0.0, 1),  # the built-in pair: one thread whatever the cores
        (SINGLE_THREAD_PARAMS - 1, 16, 0.0, 1),
        (SINGLE_THREAD_PARAMS, 16, 0.0, 1),  # one thread's worth of work
        (3 * PARAMS_PER_THREAD, 16, 0.0, 3),  # grows with the size ...
        (8_000_000_000, 16, 0.0, 16),  # ... up to the usable cores
        (8_000_000_000, 16, 0.2, 16),  # a daemon's odd tick takes no core
        (8_000_000_000, 16, 0.5, 15),  # a part-time neighbour takes one
        (8_000_000_000, 16, 5.2, 11),  # ... less those other work keeps busy
        (8_000_000_000, 2, 0.0, 2),
        (8_000_000_000, 2, 1.0, 1),  # one busy neighbour on a 2-core machine: one thread
        (8_000_000_000, 2, 6.0, 1),
        (8_000_000_000, 1, 0.0, 1),
    ],
)
def test_choice_follows_size_cores_and_busy(parameters: int, cores: int, busy: float,
                                            threads: int) -> None:
    choice = choose_threads(parameters, cores=cores, busy=busy)
    assert choice.threads == threads
    assert choice.reason.startswith("auto: ") and f"{parameters / 1e6:.1f}M" in choice.reason


def test_an_explicit_count_wins_and_says_so() -> None:
    assert choose_threads(100_000, cores=2, requested=4) == ThreadChoice(4, "--threads 4")
    assert choose_threads(8_000_000_000, cores=16, busy=0.0, requested=1).threads == 1
    with pytest.raises(ValueError):
        choose_threads(1, requested=0)


def test_default_cores_are_the_affinity_mask() -> None:
    cores = usable_cores()
    assert cores == min(len(os.sched_getaffinity(0)), quota_cores() or cores)
    assert choose_threads(8_000_000_000, busy=0.0).threads == cores


def test_a_quota_caps_the_threads_but_not_the_cpus_the_sample_covers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kubernetes CPU limit of 4 on a 64-CPU node: other pods keeping 30 of the node's CPUs
    busy leave this one its 4 (they are not its neighbours on a quota); 62 busy leave 2."""
    monkeypatch.setattr(policy, "affinity_cores", lambda: 64)
    monkeypatch.setattr(policy, "quota_cores", lambda: 4)
    assert choose_threads(8_000_000_000, busy=30.0).threads == 4
    assert choose_threads(8_000_000_000, busy=62.0).threads == 2
    assert "4 usable cores, 30.0 of 64 CPUs busy" in choose_threads(8_000_000_000,
                                                                    busy=30.0).reason


V1 = "4:cpu,cpuacct:/kubepods/pod1\n3:cpuset:/other\n0::/\n"


@pytest.mark.parametrize(
    ("own", "files", "cores"),
    [
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),  # cgroup v2, no quota
        ("0::/\n", {"cpu.max": "200000 100000\n"}, 2),
        ("0::/\n", {"cpu.max": "150000 100000\n"}, 2),  # one and a half cores: two threads
        ("0::/\n", {"cpu.max": "50000 100000\n"}, 1),
        ("0::/\n", {"cpu.max": "garbage\n"}, None),
        ("0::/\n", {}, None),  # no cgroup file at all
        # a nested cgroup: the tightest quota on the way up holds
        ("0::/a/b\n", {"a/cpu.max": "300000 100000\n", "a/b/cpu.max": "max 100000\n"}, 3),
        ("0::/a/b\n", {"cpu.max": "100000 100000\n", "a/b/cpu.max": "800000 100000\n"}, 1),
        ("0::/../x\n", {"cpu.max": "100000 100000\n"}, None),  # outside the namespace: unread
        ("garbage\n0::/\n", {"cpu.max": "200000 100000\n"}, 2),  # a line it cannot parse
        # cgroup v1: the cpu hierarchy, -1 for no quota; the cpuset line is not its path
        (V1, {"cpu/kubepods/pod1/cpu.cfs_quota_us": "-1\n",
              "cpu/kubepods/pod1/cpu.cfs_period_us": "100000\n"}, None),
        (V1, {"cpu/kubepods/pod1/cpu.cfs_quota_us": "300000\n",
              "cpu/kubepods/pod1/cpu.cfs_period_us": "100000\n",
              "cpu/other/cpu.cfs_quota_us": "100000\n",
              "cpu/other/cpu.cfs_period_us": "100000\n"}, 3),
    ],
)
def test_quota_cores_reads_the_cgroup(tmp_path: Path, own: str, files: dict[str, str],
                                      cores: int | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "self-cgroup").write_text(own)
    assert quota_cores(tmp_path, tmp_path / "self-cgroup") == cores


def test_quota_cores_without_a_cgroup_file(tmp_path: Path) -> None:
    assert quota_cores(tmp_path, tmp_path / "missing") is None


def test_cpu_times_sums_the_chosen_cpus() -> None:
    assert cpu_times(STAT, {0}) == (150, 400)  # guest time (7) is counted in user time already
    assert cpu_times(STAT, {0, 1}) == (150 + 250, 400 + 600)
    with pytest.raises(ValueError, match=r"\[2\]"):
        cpu_times(STAT, {0, 2})


def test_busy_cores_leaves_out_this_process(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """Over the sample CPU 0 ran 100 ticks and CPU 1 idled 100; 40 of the busy ticks were this
    process's own (torch threads spinning down): others kept 0.6 of a core busy."""
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    clock = iter([10.0, 10.4])

    def sleep(seconds: float) -> None:
        stat.write_text(STAT.replace("cpu0 100 ", "cpu0 200 ").replace("cpu1 200 0 50 300",
                                                                         "cpu1 200 0 50 400"))

    monkeypatch.setattr(policy, "STAT", stat)
    monkeypatch.setattr(policy.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(policy.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(policy, "time", SimpleNamespace(sleep=sleep,
                                                        process_time=lambda: next(clock)))
    assert busy_cores() == pytest.approx(0.6)


@pytest.fixture
def neighbour() -> Iterator[None]:
    """A busy loop pinned to this process's first CPU while the test runs."""
    cpu = min(os.sched_getaffinity(0))
    loop = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\n" \
           "end = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"
    process = subprocess.Popen([sys.executable, "-c", loop])
    time.sleep(0.5)  # started and pinned
    try:
        yield
    finally:
        process.kill()
        process.wait()


def test_a_neighbour_started_just_now_takes_its_core(neighbour: None) -> None:
    """The one-minute load average missed a neighbour started seconds before and gave a large
    model every core; the sample sees it at once."""
    assert busy_cores() >= 0.75
    assert choose_threads(8_000_000_000).threads <= max(1, usable_cores() - 1)


def test_using_threads_applies_and_restores() -> None:
    before = torch.get_num_threads()
    with using_threads(ThreadChoice(2, "test")):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), using_threads(ThreadChoice(3, "test")):
        raise RuntimeError
    assert torch.get_num_threads() == before


def test_count_parameters() -> None:
    assert count_parameters(torch.nn.Linear(4, 3), torch.nn.Linear(2, 2, bias=False), None) == 19
