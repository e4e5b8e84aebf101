"""Which failures are outages (the broker's or the database's, never the work's), and the
bound on waiting one out."""

from __future__ import annotations

import asyncpg
import nats.errors
import nats.js.errors
import pytest

from agency.infra.jetstream.errors import ConcurrencyError, StoreTimeout
from agency.infra.jetstream.leases import LeaseLost
from agency.infra.outage import MAX_WAIT_ENV, OutageWait, is_outage

OUTAGES = [
    nats.js.errors.NoStreamResponseError(),
    nats.errors.NoRespondersError(),
    nats.errors.TimeoutError(),
    nats.errors.ConnectionClosedError(),
    nats.errors.ConnectionReconnectingError(),
    nats.js.errors.ServiceUnavailableError(),
    StoreTimeout("append", 8.0),
    TimeoutError(),
    ConnectionRefusedError(),
    asyncpg.CannotConnectNowError("the database system is starting up"),
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.InterfaceError("connection is closed"),
    LeaseLost("tenant.t.thread.x"),
    ExceptionGroup("drive", [nats.errors.TimeoutError(), LeaseLost("k")]),
]
NOT_OUTAGES = [
    ValueError("bad tool output"),
    RuntimeError("model unreachable"),
    ConcurrencyError("tenant.t.evt.thread.x", 3, 4),
    nats.js.errors.KeyNotFoundError(),
    nats.js.errors.KeyWrongLastSequenceError(),
    asyncpg.UndefinedTableError("relation does not exist"),
    ExceptionGroup("drive", [nats.errors.TimeoutError(), ValueError("bad")]),
]


@pytest.mark.parametrize("error", OUTAGES, ids=lambda e: type(e).__name__)
def test_the_broker_or_the_database_not_answering_is_an_outage(error: Exception) -> None:
    assert is_outage(error)


@pytest.mark.parametrize("error", NOT_OUTAGES, ids=lambda e: type(e).__name__)
def test_a_failure_of_the_work_itself_is_no_outage(error: Exception) -> None:
    assert not is_outage(error)


def test_the_bound_is_read_from_the_environment_and_a_bad_one_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MAX_WAIT_ENV, raising=False)
    assert OutageWait.from_env().max_wait == 300.0
    monkeypatch.setenv(MAX_WAIT_ENV, "45")
    assert OutageWait.from_env().max_wait == 45.0
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(MAX_WAIT_ENV, bad)
        with pytest.raises(ValueError, match=f"{MAX_WAIT_ENV}={bad!r}: give seconds"):
            OutageWait.from_env()


async def test_a_failure_of_its_own_after_an_outage_is_raised_at_once() -> None:
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise nats.js.errors.NoStreamResponseError
        raise ValueError("bad tool output")

    with pytest.raises(ValueError, match="bad tool output"):
        await OutageWait(max_wait=5.0, wait_initial=0.01, wait_max=0.01).wait_out("test", step)
    assert len(calls) == 2
