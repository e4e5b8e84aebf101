"""Aegra (the open-source LangGraph Agent Server) for `just bench http`: installed into a
virtualenv of its own on first use, started as a subprocess on loopback.

Aegra is PyPI's `aegra-api`: a FastAPI app (`aegra_api.main:app`, run by uvicorn) that
reads the graphs it serves from `aegra.json` (`AEGRA_CONFIG`), its PostgreSQL from
`DATABASE_URL` (migrations applied at start-up), and checkpoints with LangGraph's
`AsyncPostgresSaver`. 0.6.0 is the newest release the index serves for Python 3.11 (later
ones require 3.12); it needs no Redis. The graph it serves is `bench/aegra_graph.py`.
Its schema calls `uuid_generate_v4()` of the `uuid-ossp` extension, which the embedded
PostgreSQL wheel does not ship: `postgres_settings` gives the server a SQL-only
`uuid-ossp` (through `extension_control_path`) whose `uuid_generate_v4()` is the built-in
`gen_random_uuid()`, the same random version-4 UUID.

The virtualenv (`~/.cache/agency-bench/aegra-<version>`, or under `$XDG_CACHE_HOME`) holds
Aegra, the model client the graph uses and their dependencies: none of them is a project
dependency, and nothing of them is imported by this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Self

import httpx

from agency.infra.launch import free_port
from bench.http_system import BenchError

AEGRA_VERSION = "0.6.0"
# greenlet: SQLAlchemy's asyncio needs it and aegra-api 0.6.0 does not require it (later
# releases do). langchain-core: 1.7.3 and later require a certifi the registry lacks.
PACKAGES = (
    f"aegra-api=={AEGRA_VERSION}",
    "greenlet==3.5.6",
    "langchain-openai==1.7.3",
    "langchain-core==1.7.2",
)
GRAPH = Path(__file__).resolve().parent / "aegra_graph.py"
GRAPH_ID = "approver"
INSTALL_TIMEOUT = 900.0
START_TIMEOUT = 120.0
STOP_TIMEOUT = 20.0


def venv_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "agency-bench" / f"aegra-{AEGRA_VERSION}"


def ensure_aegra() -> Path:
    """The virtualenv's python, Aegra installed in it (on first use)."""
    root = venv_dir()
    python = root / "bin" / "python"
    stamp = root / ".installed"
    if stamp.exists() and stamp.read_text() == " ".join(PACKAGES):
        return python
    print(f"installing Aegra into {root} ({', '.join(PACKAGES)})", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    command = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    result = subprocess.run(
        [*command, *PACKAGES], timeout=INSTALL_TIMEOUT, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise BenchError(f"installing Aegra failed: {result.stderr.strip()[-2000:]}")
    stamp.write_text(" ".join(PACKAGES))
    return python


UUID_OSSP_CONTROL = """\
comment = 'uuid_generate_v4() as the built-in gen_random_uuid()'
default_version = '1.1'
relocatable = true
trusted = true
"""
UUID_OSSP_SQL = """\
CREATE FUNCTION uuid_generate_v4() RETURNS uuid AS 'SELECT gen_random_uuid()'
LANGUAGE SQL VOLATILE PARALLEL SAFE;
"""


def postgres_settings(root: Path) -> dict[str, str]:
    """Settings for Aegra's PostgreSQL: a `uuid-ossp` extension written under `root`."""
    extension = root / "extension"
    extension.mkdir(parents=True, exist_ok=True)
    (extension / "uuid-ossp.control").write_text(UUID_OSSP_CONTROL)
    (extension / "uuid-ossp--1.1.sql").write_text(UUID_OSSP_SQL)
    return {"extension_control_path": f"{root}:$system"}


class AegraServer:
    """`uvicorn aegra_api.main:app` on 127.0.0.1, serving `bench/aegra_graph.py` as
    `approver`, against `database_url`, its model at `model_url`."""

    def __init__(self, python: Path, database_url: str, model_url: str) -> None:
        self._python = python
        self._database_url = database_url
        self._model_url = model_url
        self._dir = Path(tempfile.mkdtemp(prefix="agency-bench-aegra-"))
        self._log = self._dir / "aegra.log"
        self._process: asyncio.subprocess.Process | None = None
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "Aegra is not started"
        return self._process.pid

    async def __aenter__(self) -> Self:
        config = self._dir / "aegra.json"
        config.write_text(json.dumps({"graphs": {GRAPH_ID: f"{GRAPH}:graph"}}))
        env = {
            **os.environ,
            "AEGRA_CONFIG": str(config),
            "DATABASE_URL": self._database_url,
            "OPENAI_BASE_URL": self._model_url,
            "OPENAI_API_KEY": "fake",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": "",
        }
        command = ["-m", "uvicorn", "aegra_api.main:app", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--log-level", "warning", "--no-access-log"]
        with self._log.open("wb") as log:
            self._process = await asyncio.create_subprocess_exec(
                str(self._python),
                *command,
                env=env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self._dir,
                start_new_session=True,
            )
        try:
            await self._until_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def log_tail(self, lines: int = 30) -> str:
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    async def _until_ready(self) -> None:
        assert self._process is not None
        async with httpx.AsyncClient(base_url=self.url, timeout=5.0) as http:
            try:
                async with asyncio.timeout(START_TIMEOUT):
                    while True:
                        if self._process.returncode is not None:
                            raise BenchError(f"Aegra exited at start-up:\n{self.log_tail()}")
                        try:
                            if (await http.get("/health")).status_code == 200:
                                return
                        except httpx.TransportError:
                            pass
                        await asyncio.sleep(0.25)
            except TimeoutError:
                raise BenchError(
                    f"Aegra did not answer within {START_TIMEOUT:.0f} s:\n{self.log_tail()}"
                ) from None

    async def stop(self) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            with _gone():
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                with _gone():
                    os.killpg(process.pid, signal.SIGKILL)
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
        shutil.rmtree(self._dir, ignore_errors=True)


class _gone:
    """Ignore a process group that already exited."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is ProcessLookupError
