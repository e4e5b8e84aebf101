"""Serve the API in-process with uvicorn (httptools parser, websockets) until `stop` is set."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator

import structlog
import uvicorn

from agency.services.api.app import create_app
from agency.services.api.deps import ApiDeps
from agency.services.api.streaming import closing_event

log = structlog.get_logger(__name__)

START_TIMEOUT = 10.0
# Open streams are told to end first; this bounds the rest (requests still in flight).
GRACEFUL_TIMEOUT = 5.0


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals alone: the host process owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; with port 0 the system picks a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns TCP_NODELAY on only for sockets that say they are
    # TCP, and without it a response on a kept-alive connection waits ~40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def run_api(
    deps: ApiDeps,
    host: str,
    port: int,
    stop: asyncio.Event,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until `stop` is set, then stop within a bound; `ready` gets the base URL."""
    app = create_app(deps)
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,  # logging belongs to the host process
        access_log=False,
        # Which proxy may say who the client is: the operator's `AGENCY_TRUSTED_PROXIES`
        # (`forwarded.py`), not uvicorn's default trust of 127.0.0.1.
        proxy_headers=False,
        timeout_graceful_shutdown=int(GRACEFUL_TIMEOUT),
        ws_ping_interval=20.0,
    )
    server = _Server(config)
    sock = bind(host, port)
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="api-server")
    try:
        await _started(server, serving)
        url = url_of(sock)
        log.info("api listening", url=url)
        if ready is not None:
            ready(url)
        stopping = asyncio.create_task(stop.wait(), name="api-stop")
        try:
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
    finally:
        closing_event(app.state).set()
        server.should_exit = True
        await _finish(server, serving)
        sock.close()


async def _started(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    async with asyncio.timeout(START_TIMEOUT):
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
                raise RuntimeError("the API server stopped while starting")
            await asyncio.sleep(0.01)


async def _finish(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    done, _ = await asyncio.wait({serving}, timeout=GRACEFUL_TIMEOUT + 2.0)
    if not done:
        log.warning("api server did not stop in time, forcing it")
        server.force_exit = True
        done, _ = await asyncio.wait({serving}, timeout=2.0)
    if not done:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        return
    # Surface a crash of the server itself; a normal stop returns None.
    if not serving.cancelled() and (error := serving.exception()) is not None:
        raise error
