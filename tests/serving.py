"""The API, and the services beside it, run in a test's own process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agency.services.api.deps import ApiDeps
from agency.services.api.server import run_api
from agency.services.stack import StackConfig, run_stack


@asynccontextmanager
async def serving(deps: ApiDeps, stack: StackConfig | None = None) -> AsyncIterator[str]:
    """The API's URL while it serves on a free loopback port, with the services of `stack`
    running beside it; on the way out all stop, within bounded waits."""
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    tasks = [asyncio.create_task(run_stack(stack, stop))] if stack is not None else []
    tasks.append(asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, started.set_result)))
    try:
        yield await asyncio.wait_for(asyncio.shield(started), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
