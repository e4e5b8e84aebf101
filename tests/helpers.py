"""Bounded waiting for tests (poll a condition instead of sleeping), and a database of a
test's own."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.infra.launch.postgres_server import ensure_database

if TYPE_CHECKING:
    import httpx

    from agency.infra.jetstream.records import RecordedEvent

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]


async def assert_eventually(
    fn: Callable[[], Awaitable[T]], *, timeout: float = 10.0, interval: float = 0.05
) -> T:
    """Call `fn` until it returns without raising AssertionError, at most `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await fn()
        except AssertionError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(interval)


class ThreadWaits:
    """Bounded waits on a thread's events, for a harness that reads them (`events`)."""

    wait_timeout: ClassVar[float] = 20.0

    async def events(self, thread: str) -> list[RecordedEvent]:
        raise NotImplementedError

    async def wait_for(
        self,
        thread: str,
        check: Callable[[list[RecordedEvent]], bool],
        timeout: float | None = None,
    ) -> list[RecordedEvent]:
        """The thread's events once `check` holds of them, failing after `timeout` seconds."""

        async def ready() -> list[RecordedEvent]:
            events = await self.events(thread)
            assert check(events), [e.type for e in events]
            return events

        return await assert_eventually(ready, timeout=timeout or self.wait_timeout)

    async def wait_terminal(
        self, thread: str, count: int = 1, timeout: float | None = None
    ) -> list[RecordedEvent]:
        """The thread's events once `count` of its runs have ended."""
        return await self.wait_for(
            thread, lambda es: sum(e.type in RUN_TERMINAL_TYPES for e in es) >= count, timeout
        )


async def run_agency(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """`agency <args>` run as a process of its own from the repository, as an operator runs
    it, within `timeout` seconds: its exit status, what it printed and its errors."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", *args,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    return proc.returncode or 0, out.decode(), err.decode()


def settled(events: list[Any]) -> list[Any]:
    """A thread's events without the runtime's `checkpoint.saved` (each follows a pause or a
    run's end in the same append): for tests about what came last."""
    return [e for e in events if e.type != "checkpoint.saved"]


async def run_completes_over_http(
    http: httpx.AsyncClient, agency: str, message: str = "hello", agent_type: str = "worker"
) -> str:
    """Create a thread of `agent_type` over HTTP, invoke it with `message` and wait until its
    run is `completed` in the thread's state; the thread's id."""
    r = await http.post(f"/agency/{agency}/agents", json={"agentType": agent_type})
    assert r.status_code == 201, r.text
    thread: str = r.json()["id"]
    body = {"messages": [{"role": "user", "content": message}]}
    r = await http.post(f"/agency/{agency}/agent/{thread}/invoke", json=body)
    assert r.status_code == 202, r.text

    async def completed() -> None:
        r = await http.get(f"/agency/{agency}/agent/{thread}/state")
        assert r.status_code == 200, r.text
        assert r.json()["run"]["status"] == "completed", r.json()["run"]

    await assert_eventually(completed, timeout=60)
    return thread


async def printed_until_ready(
    proc: asyncio.subprocess.Process, errors: asyncio.Task[bytes], timeout: float = 90
) -> dict[str, str]:
    """The `name: value` lines `agency up` printed before `ready` (api, api key, …); a
    failure with its stderr if it exits first."""
    assert proc.stdout is not None
    printed: dict[str, str] = {}
    async with asyncio.timeout(timeout):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise AssertionError(f"agency up exited: {(await errors).decode()[-3000:]}")
            if line.startswith("ready"):
                return printed
            key, _, value = line.partition(":")
            printed[key.strip()] = value.strip()


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy `src` to `dst` until either end closes, then cut `dst` (a test proxy's half)."""
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        dst.transport.abort()


async def fresh_database(database_url: str, prefix: str) -> str:
    """The URL of a new, empty database (`prefix` and a unique suffix) on the server of
    `database_url`, so tests that share the server never meet."""
    name = prefix + new_id().lower()
    await ensure_database(database_url, name)
    return database_url.rsplit("/", 1)[0] + "/" + name


async def created_tenant(
    http: httpx.AsyncClient, admin_token: str, name: str, agency: str | None = None
) -> tuple[str, str, str | None]:
    """A new tenant (and, named, an agency of it): its API key, its id and the agency's.
    Each create may answer 202 (stored, the read models behind, as on a loaded machine):
    then its key (and the agency) is waited for until it reads back."""
    r = await http.post(
        "/tenants", json={"name": name}, headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert r.status_code in (201, 202), r.text
    key, tenant = r.json()["apiKey"], r.json()["tenantId"]
    auth = {"Authorization": f"Bearer {key}"}

    async def key_works() -> None:
        assert (await http.get("/agencies", headers=auth)).status_code == 200

    if r.status_code == 202:
        await assert_eventually(key_works, timeout=60, interval=0.2)
    if agency is None:
        return key, tenant, None
    r = await http.post("/agencies", json={"name": agency}, headers=auth)
    assert r.status_code in (201, 202), r.text
    agency_id = str(r.json()["id"])

    async def agency_listed() -> None:
        listed = (await http.get("/agencies", headers=auth)).json()
        assert agency_id in {a["id"] for a in listed}

    if r.status_code == 202:
        await assert_eventually(agency_listed, timeout=60, interval=0.2)
    return key, tenant, agency_id
