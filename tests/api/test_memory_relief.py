"""Memory is given back once per overload, after it has passed: not while requests are
being refused, not without an overload, not twice for one."""

from __future__ import annotations

import ctypes.util
import time

import pytest

from agency.services.api.memory_relief import MemoryRelief, fix_mmap_threshold, rss_mb
from agency.services.tenancy.admission import Admission, AdmissionSettings, Refused

ONE = AdmissionSettings(initial_limit=1, min_limit=1, max_limit=1)


async def test_memory_is_given_back_once_after_an_overload_has_passed() -> None:
    admission = Admission(ONE)
    relief = MemoryRelief(admission, quiet_for=5.0)
    now = time.monotonic()
    assert not relief.due(now + 60)  # no overload yet
    admission.enter("b", now)
    with pytest.raises(Refused):
        admission.enter("b", now + 1)
    assert not relief.due(now + 3)  # refused 2 s ago: not over yet
    assert relief.due(now + 6)
    await relief.relieve()
    assert relief.times == 1
    assert not relief.due(time.monotonic() + 60)  # that overload is done with
    assert rss_mb() > 0


async def test_the_relief_empties_the_caches_it_is_given() -> None:
    admission = Admission(ONE)
    kept = {"a": 1, "b": 2}

    def shed() -> int:
        dropped = len(kept)
        kept.clear()
        return dropped

    relief = MemoryRelief(admission, shed=(shed,))
    await relief.relieve()
    assert kept == {}


def test_glibc_keeps_large_blocks_mapped_so_each_is_given_back_when_freed() -> None:
    assert fix_mmap_threshold() is (ctypes.util.find_library("c") is not None)
