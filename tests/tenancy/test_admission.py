"""Admission under overload: who is admitted once the process is saturated, and how the
measured limit follows latency (pure arithmetic on counts and a given clock)."""

from __future__ import annotations

import re

import pytest

from agency.services.tenancy.admission import (
    ADMISSION_LIMIT,
    Admission,
    AdmissionSettings,
    Refused,
    RunShares,
    Ticket,
)

FIXED = AdmissionSettings(initial_limit=8, min_limit=8, max_limit=8)


def _fill(admission: Admission, tenant: str, count: int) -> list[Ticket]:
    return [admission.enter(tenant, 0.0) for _ in range(count)]


def test_a_pool_with_room_admits_one_tenant_beyond_any_share() -> None:
    admission = Admission(FIXED)
    _fill(admission, "a", 1)
    assert len(_fill(admission, "b", 7)) == 7  # b holds 7 of 8: room, so no share applies


def test_a_tenant_at_its_share_of_a_full_pool_is_refused_with_when_to_retry() -> None:
    admission = Admission(FIXED)
    _fill(admission, "a", 2)
    _fill(admission, "b", 6)
    with pytest.raises(Refused) as refused:
        admission.enter("b", 0.0)
    error = refused.value
    assert error.retry_after >= 1
    message = str(error)
    assert message.startswith(ADMISSION_LIMIT)
    assert re.search(rf"retry in {error.retry_after} s$", message), message


def test_a_tenant_under_its_share_is_admitted_though_the_pool_is_full() -> None:
    admission = Admission(FIXED)
    _fill(admission, "a", 1)
    _fill(admission, "b", 7)
    # Full: a holds 1 of its share of 4, so it is admitted up to 4; b is refused.
    assert len(_fill(admission, "a", 3)) == 3
    with pytest.raises(Refused):
        admission.enter("a", 0.0)
    with pytest.raises(Refused):
        admission.enter("b", 0.0)


def test_a_freed_place_goes_to_the_tenant_under_its_share() -> None:
    admission = Admission(FIXED)
    _fill(admission, "a", 2)
    b = _fill(admission, "b", 6)
    b[0].done(0.1)
    b[0].done(0.1)  # once only
    assert admission.work.total == 7
    _fill(admission, "b", 1)  # room again: admitted
    with pytest.raises(Refused):
        admission.enter("b", 0.0)
    assert len(_fill(admission, "a", 2)) == 2


def test_shares_follow_the_tenants_weights() -> None:
    admission = Admission(
        AdmissionSettings(initial_limit=8, min_limit=8, max_limit=8, weights="gold=3")
    )
    _fill(admission, "other", 1)
    _fill(admission, "gold", 7)
    # gold's share of the full pool is 8 * 3/4 = 6: it holds 7, so it is refused, and the
    # other tenant is admitted up to its 2.
    with pytest.raises(Refused):
        admission.enter("gold", 0.0)
    assert len(_fill(admission, "other", 1)) == 1
    with pytest.raises(Refused):
        admission.enter("other", 0.0)


def test_the_limit_shrinks_when_answers_slow_down_and_grows_back_when_they_are_quick() -> None:
    admission = Admission(AdmissionSettings(initial_limit=32, min_limit=4, max_limit=64))
    work = admission.work
    clock = 0.0
    for _ in range(50):  # quiet: one request at a time, answered in 50 ms
        admission.enter("t", clock).done(clock + 0.05)
    usual = work.limit

    def saturated(latency: float, answers: int) -> None:
        # Always as many in flight as the limit allows: one answered, the next let in.
        nonlocal clock
        in_flight = [admission.enter("t", clock) for _ in range(int(work.limit))]
        for _ in range(answers):
            clock += latency / max(1, len(in_flight))
            in_flight.pop(0).done(clock)
            while work.total < int(work.limit):
                in_flight.append(admission.enter("t", clock))
        for ticket in in_flight:
            ticket.done(clock, sample=False)

    saturated(0.05, 200)
    quick = work.limit
    assert quick > usual, (usual, quick)
    saturated(1.0, 400)  # ten times slower, for long
    slow = work.limit
    assert slow < quick / 2, (quick, slow)
    assert slow >= 4
    saturated(0.05, 400)
    assert work.limit > slow * 2, (slow, work.limit)
    assert work.limit <= 64


def test_a_limit_not_used_does_not_grow() -> None:
    admission = Admission(AdmissionSettings(initial_limit=16, min_limit=4, max_limit=64))
    for _ in range(200):
        admission.enter("t", 0.0).done(0.01)
    assert admission.work.limit == 16


def test_reads_and_streams_have_their_own_bound() -> None:
    admission = Admission(AdmissionSettings(max_open=4))
    _fill(admission, "b", 8)  # work is not reads
    streams = [admission.open("b", 0.0) for _ in range(4)]
    with pytest.raises(Refused, match="reads and streams"):
        admission.open("b", 0.0)
    admission.open("a", 0.0)  # a holds none: under its share of 2
    streams[0].done(30.0)  # open for 30 s
    with pytest.raises(Refused) as refused:
        admission.open("b", 30.0)  # still full, b still over its share
    assert refused.value.retry_after >= 30  # as long as a stream stays open


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("AGENCY_ADMISSION_WEIGHTS", "acme=0", "'acme=0'"),
        ("AGENCY_ADMISSION_WEIGHTS", "acme", "'acme'"),
        ("AGENCY_ADMISSION_MIN_LIMIT", "0", "AGENCY_ADMISSION_MIN_LIMIT"),
        ("AGENCY_ADMISSION_MAX_LIMIT", "4", "AGENCY_ADMISSION_MAX_LIMIT"),
        ("AGENCY_ADMISSION_LATENCY_TOLERANCE", "0.5", "AGENCY_ADMISSION_LATENCY_TOLERANCE"),
    ],
)
def test_a_bad_setting_stops_the_process_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, named: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(named)):
        AdmissionSettings.from_env()


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENCY_ADMISSION_MAX_LIMIT", "40")
    monkeypatch.setenv("AGENCY_ADMISSION_WEIGHTS", "t_1=2, t_2=0.5")
    settings = AdmissionSettings.from_env()
    assert settings.max_limit == 40
    assert Admission(settings).work.weights == {"t_1": 2.0, "t_2": 0.5}


RUNS = AdmissionSettings(runs_initial_limit=4, runs_min_limit=4, runs_max_limit=4)


def test_runs_in_progress_past_the_limit_refuse_the_tenant_at_its_share_only() -> None:
    shares = RunShares(RUNS)
    for n in range(3):
        shares.accepted("b", f"b{n}", 0.0)
    assert shares.refusal("b", 0.0) is None  # 3 of 4: room
    shares.accepted("a", "a0", 0.0)
    refused = shares.refusal("b", 0.0)
    assert refused is not None and refused.retry_after >= 1
    assert "3 runs in progress, its share is 2" in str(refused)
    assert shares.refusal("a", 0.0) is None  # a holds 1 of its 2
    shares.accepted("a", "a0", 0.0)  # seen again (the log and the step that decided it)
    assert shares.in_progress == 4
    shares.ended("b", "b0", 1.0)
    shares.ended("b", "b0", 1.0)
    assert shares.in_progress == 3
    assert shares.refusal("b", 1.0) is None


def test_a_tenant_past_its_share_waits_about_as_long_as_its_runs_take() -> None:
    shares = RunShares(RUNS)
    for n in range(40):  # runs of 3 s each, one at a time
        shares.accepted("b", f"r{n}", n * 3.0)
        shares.ended("b", f"r{n}", n * 3.0 + 3.0)
    for n in range(4):
        shares.accepted("b", f"b{n}", 200.0)
    refused = shares.refusal("b", 200.0)
    assert refused is not None
    assert 3 <= refused.retry_after <= 4, refused


def test_run_shares_switched_off_refuse_nothing() -> None:
    shares = RunShares(AdmissionSettings(enabled=False, runs_min_limit=1, runs_initial_limit=1))
    shares.accepted("b", "b0", 0.0)
    shares.accepted("b", "b1", 0.0)
    assert shares.refusal("b", 0.0) is None


def test_a_large_body_takes_a_place_per_64_kb_of_the_tenants_share() -> None:
    admission = Admission(FIXED)
    _fill(admission, "a", 1)
    admission.enter("b", 0.0, body_bytes=200_000)  # four places
    assert admission.work.held["b"] == 4
    _fill(admission, "b", 3)  # 8 of 8: full
    with pytest.raises(Refused, match="per 64 KB of body"):
        admission.enter("b", 0.0)  # b holds 7 places, its share is 4
    assert admission.work.total == 8
