"""The thread policy: a tiny model decodes on one thread, a large one on the usable cores."""

from __future__ import annotations

import os

import pytest
import torch

from kernels_ref.threads import (
    PARAMS_PER_THREAD,
    SINGLE_THREAD_PARAMS,
    ThreadChoice,
    choose_threads,
    count_parameters,
    usable_cores,
    using_threads,
)


@pytest.mark.parametrize(
    ("parameters", "cores", "load", "threads"),
    [
        (100_000, 16, 0.0, 1),  # the built-in pair: one thread whatever the cores
        (SINGLE_THREAD_PARAMS - 1, 16, 0.0, 1),
        (SINGLE_THREAD_PARAMS, 16, 0.0, 1),  # one thread's worth of work
        (3 * PARAMS_PER_THREAD, 16, 0.0, 3),  # grows with the size ...
        (8_000_000_000, 16, 0.0, 16),  # ... up to the usable cores
        (8_000_000_000, 16, 1.0, 16),  # this process alone is a load of 1
        (8_000_000_000, 16, 5.2, 12),  # ... less those the load keeps busy
        (8_000_000_000, 2, 0.0, 2),
        (8_000_000_000, 2, 6.0, 1),  # a loaded 2-core machine: one thread
        (8_000_000_000, 1, 0.0, 1),
    ],
)
def test_choice_follows_size_cores_and_load(parameters: int, cores: int, load: float,
                                            threads: int) -> None:
    choice = choose_threads(parameters, cores=cores, load=load)
    assert choice.threads == threads
    assert choice.reason.startswith("auto: ") and f"{parameters / 1e6:.1f}M" in choice.reason


def test_an_explicit_count_wins_and_says_so() -> None:
    assert choose_threads(100_000, cores=2, requested=4) == ThreadChoice(4, "--threads 4")
    assert choose_threads(8_000_000_000, cores=16, load=0.0, requested=1).threads == 1
    with pytest.raises(ValueError):
        choose_threads(1, requested=0)


def test_default_cores_are_the_affinity_mask() -> None:
    cores = usable_cores()
    assert cores == len(os.sched_getaffinity(0))
    assert choose_threads(8_000_000_000, load=0.0).threads == cores


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
