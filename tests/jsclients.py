"""What the JavaScript clients' tests share: a runner for the node scripts in tests/js
(the LangGraph JS SDK, AG-UI's client, the AI SDK, the MCP Inspector), and the pages
bundled from npm packages, served on an origin of their own for a browser."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

JS = Path(__file__).resolve().parent / "js"
NODE_TIMEOUT = 120.0


def node_ready() -> str:
    """The node binary, with the packages tests/js pins installed; fails saying how else."""
    node = shutil.which("node")
    if node is None:
        raise AssertionError("no node: apt-get install -y nodejs npm (see .ci/run)")
    if not (JS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        raise AssertionError(
            "tests/js has no node_modules: npm ci --prefix tests/js --ignore-scripts (see .ci/run)"
        )
    return node


async def run_node(
    script: str, *args: str, env: dict[str, str] | None = None, timeout: float = NODE_TIMEOUT
) -> Any:
    """Run `node tests/js/<script> args...`; answers the JSON it prints last on stdout
    (None when it prints nothing).
    The script fails (exit status not 0) with its error on stderr."""
    node = node_ready()
    process = await asyncio.create_subprocess_exec(
        node,
        str(JS / script),
        *args,
        cwd=JS,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"node {script} {' '.join(args)}: no answer in {timeout} s") from None
    if process.returncode != 0:
        raise AssertionError(
            f"node {script} {' '.join(args)} failed ({process.returncode}):\n"
            f"{err.decode(errors='replace')[-6000:]}"
        )
    lines = [line for line in out.decode().splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else None


@dataclass
class Site:
    """Static files from `root` over HTTP at `http://localhost:<port>`: an origin of its own,
    as a frontend's dev server or CDN is (the API is at 127.0.0.1, another origin)."""

    root: Path
    url: str = ""
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> Site:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://localhost:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode().split("?")[0].lstrip("/") or "index.html"
            file = (self.root / path).resolve()
            if file.parent != self.root.resolve() or not file.is_file():
                writer.write(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            else:
                body = file.read_bytes()
                kind = "text/html" if file.suffix == ".html" else "text/javascript"
                writer.write(
                    f"HTTP/1.1 200 OK\r\nContent-Type: {kind}; charset=utf-8\r\n"
                    f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                    "Connection: close\r\n\r\n".encode()
                    + body
                )
            await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def build_page(entry: str, out: Path) -> Path:
    """Bundle tests/js/<entry> and its npm packages into `out` (index.html, app.js)."""
    await run_node("build.mjs", entry, str(out))
    return out


@asynccontextmanager
async def built_site(entry: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    """tests/js/<entry> bundled (`build_page`) and served on an origin of its own (`Site`)."""
    out = await build_page(entry, tmp_path_factory.mktemp(Path(entry).stem))
    async with Site(out) as served:
        yield served
