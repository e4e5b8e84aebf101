"""`agency up` as a subprocess for `just bench system`, and the HTTP client the benchmark
talks to it with.

`RunningSystem` starts `python -m services.cli.main up --data-dir <tmp> --port 0` pointed
at a model server of the caller's (`OPENAI_BASE_URL`), waits for `endpoints.json`, and on
exit stops it with SIGTERM (bounded wait, then SIGKILL of the whole process tree) and
removes the directory. `Api` is an httpx client with the tenant's key; `events` follows a
thread's SSE stream with httpx-sse.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx
import msgspec
import psutil
from httpx_sse import aconnect_sse

from agency.infra.endpoints import Endpoints, EndpointsNotFound, read_endpoints

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
REQUEST_TIMEOUT = 30.0


class BenchError(Exception):
    """The benchmark could not measure what it claims: a run failed or never ended."""


# --- the system as a subprocess ------------------------------------------------------------


class RunningSystem:
    """`agency up` in a temporary data directory, until the context ends."""

    def __init__(self, model_url: str, env: dict[str, str] | None = None) -> None:
        self._model_url = model_url
        self._env = env or {}
        self._dir = Path(tempfile.mkdtemp(prefix="agency-bench-system-"))
        self._log = self._dir / "up.log"
        self._process: asyncio.subprocess.Process | None = None
        self.endpoints: Endpoints | None = None

    @property
    def data_dir(self) -> Path:
        """Where the system keeps its data and endpoints.json (`--data-dir`)."""
        return self._dir

    @property
    def pid(self) -> int:
        assert self._process is not None, "the system is not started"
        return self._process.pid

    async def __aenter__(self) -> Self:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": self._model_url,
            "OPENAI_API_KEY": "fake",
            **self._env,
        }
        command = ["-m", "agency.services.cli.main", "up", "--data-dir", str(self._dir)]
        command += ["--port", "0"]
        with self._log.open("wb") as log:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                *command,
                env=env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                cwd=ROOT,
            )
        try:
            self.endpoints = await self._until_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def _until_ready(self) -> Endpoints:
        assert self._process is not None
        async with asyncio.timeout(START_TIMEOUT):
            while True:
                if self._process.returncode is not None:
                    raise BenchError(f"agency up exited at start:\n{self.log_tail()}")
                with contextlib.suppress(EndpointsNotFound, msgspec.DecodeError):
                    endpoints = read_endpoints(self._dir)
                    if endpoints.api_url and endpoints.api_key:
                        return endpoints
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        process, self._process = self._process, None
        try:
            if process is not None and process.returncode is None:
                tree = _tree(process.pid)
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    print("  agency up did not stop within 30 s: killed", flush=True)
                    for child in tree:
                        with contextlib.suppress(psutil.Error):
                            child.kill()
                    await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@dataclass(frozen=True, slots=True)
class Memory:
    """The process tree's resident memory: RSS summed (shared pages counted in every
    process that maps them) and PSS summed (shared pages split between them)."""

    processes: int
    rss_mb: float
    pss_mb: float


def memory_of(pid: int) -> Memory:
    rss = pss = 0
    processes = 0
    for process in _tree(pid):
        with contextlib.suppress(psutil.Error):
            info = process.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
            processes += 1
    return Memory(processes, rss / 2**20, pss / 2**20)


def memory_by_kind(pid: int) -> dict[str, float]:
    """PSS in MB of the process tree, by kind of process: what holds the memory."""
    kinds: dict[str, float] = {}
    for process in _tree(pid):
        with contextlib.suppress(psutil.Error):
            info = process.memory_full_info()
            name = process.name()
            kind = "python" if name.startswith("python") or name == "agency" else name
            kinds[kind] = kinds.get(kind, 0.0) + getattr(info, "pss", info.rss) / 2**20
    return kinds


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) the process tree has used so far."""
    total = 0.0
    for process in _tree(pid):
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


async def busy(pid: int, seconds: float) -> float:
    """The process tree's CPU use over the next `seconds`, in cores (1.0: one core busy)."""
    before, started = cpu_seconds(pid), asyncio.get_running_loop().time()
    await asyncio.sleep(seconds)  # a measuring window, not a wait for anything
    return (cpu_seconds(pid) - before) / (asyncio.get_running_loop().time() - started)


# --- the HTTP API ----------------------------------------------------------------------------


class Api:
    """The tenant's view of the API over one httpx connection pool."""

    def __init__(self, endpoints: Endpoints, connections: int = 32) -> None:
        assert endpoints.api_url and endpoints.api_key
        self.http = httpx.AsyncClient(
            base_url=endpoints.api_url,
            headers={"Authorization": f"Bearer {endpoints.api_key}"},
            timeout=REQUEST_TIMEOUT,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def post(self, path: str, body: dict[str, Any], expect: int | tuple[int, ...]) -> Any:
        response = await self.http.post(path, json=body)
        allowed = expect if isinstance(expect, tuple) else (expect,)
        if response.status_code not in allowed:
            raise BenchError(f"POST {path} answered {response.status_code}: {response.text}")
        return response.json()

    async def get(self, path: str, **params: Any) -> Any:
        response = await self.http.get(path, params=params)
        if response.status_code != 200:
            raise BenchError(f"GET {path} answered {response.status_code}: {response.text}")
        return response.json()

    async def agency(self, name: str) -> str:
        return str((await self.post("/agencies", {"name": name}, (201, 202)))["id"])

    async def blueprint(self, agency: str, body: dict[str, Any]) -> None:
        await self.post(f"/agency/{agency}/blueprints", body, (201, 202))

    async def thread(self, agency: str, agent_type: str) -> str:
        body = {"agentType": agent_type}
        return str((await self.post(f"/agency/{agency}/agents", body, (201, 202)))["id"])

    async def started(self, agency: str, agent_type: str, text: str) -> tuple[str, str]:
        """A thread created and its first run started in one request: (thread, run id)."""
        body = {"agentType": agent_type, "messages": [{"role": "user", "content": text}]}
        answer = await self.post(f"/agency/{agency}/agents", body, 202)
        return str(answer["id"]), str(answer["runId"])

    async def invoke(self, agency: str, thread: str, text: str) -> str:
        body = {"messages": [{"role": "user", "content": text}]}
        answer = await self.post(f"/agency/{agency}/agent/{thread}/invoke", body, 202)
        return str(answer["runId"])

    async def approve(self, agency: str, thread: str, run_id: str) -> None:
        body = {"approved": True, "runId": run_id}
        await self.post(f"/agency/{agency}/agent/{thread}/approve", body, 202)

    async def threads(self, agency: str) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = await self.get(f"/agency/{agency}/agents")
        return answer

    @contextlib.asynccontextmanager
    async def events(
        self, agency: str, thread: str, from_seq: int = 0
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """The thread's SSE stream, open: its events (one unnamed frame each) as dicts."""
        path = f"/agency/{agency}/agent/{thread}/stream"
        timeout = httpx.Timeout(REQUEST_TIMEOUT, read=None)
        async with aconnect_sse(
            self.http, "GET", path, params={"fromSeq": from_seq}, timeout=timeout
        ) as source:
            if source.response.status_code != 200:
                raise BenchError(f"GET {path} answered {source.response.status_code}")

            async def frames() -> AsyncIterator[dict[str, Any]]:
                async for sse in source.aiter_sse():
                    if sse.event == "message" and sse.data:
                        event: dict[str, Any] = json.loads(sse.data)
                        yield event

            yield frames()
