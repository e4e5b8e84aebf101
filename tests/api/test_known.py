"""What the API keeps as found: agencies for good, blueprints a while and never past a
deletion it heard."""

from __future__ import annotations

import pytest

from agency.services.api import known
from agency.services.api.known import KnownResources


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(known.time, "monotonic", clock)
    return clock


def test_agencies_are_kept_for_good_the_least_recently_used_first_out(clock: Clock) -> None:
    kept = KnownResources(agencies=2)
    kept.found_agency("t1", "a1")
    kept.found_agency("t1", "a2")
    clock.now += 3600
    assert kept.has_agency("t1", "a1")  # a1 is now the most recently used
    assert not kept.has_agency("t2", "a1")  # another tenant's agency of the same id
    kept.found_agency("t1", "a3")
    assert kept.has_agency("t1", "a1") and kept.has_agency("t1", "a3")
    assert not kept.has_agency("t1", "a2")


def test_a_blueprint_is_kept_for_the_ttl(clock: Clock) -> None:
    kept = KnownResources(ttl=30.0)
    kept.found_blueprint("t1", "a1", "helper")
    clock.now += 29.0
    assert kept.has_blueprint("t1", "a1", "helper")
    assert not kept.has_blueprint("t1", "a2", "helper")
    clock.now += 2.0
    assert not kept.has_blueprint("t1", "a1", "helper")


def test_a_deleted_blueprint_is_not_kept_again_from_a_read_model_behind(clock: Clock) -> None:
    kept = KnownResources(ttl=30.0)
    kept.found_blueprint("t1", "a1", "helper")
    kept.blueprint_deleted("t1", "a1", "helper")
    assert not kept.has_blueprint("t1", "a1", "helper")
    # A read model that has not applied the deletion yet still lists it: not kept.
    kept.found_blueprint("t1", "a1", "helper")
    assert not kept.has_blueprint("t1", "a1", "helper")
    # Saved again later and found: kept as usual once the deletion is that old.
    clock.now += 31.0
    kept.found_blueprint("t1", "a1", "helper")
    assert kept.has_blueprint("t1", "a1", "helper")
