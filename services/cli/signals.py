"""Ctrl-C and SIGTERM as an event a foreground command waits on; SIGUSR1 as a dump of
every asyncio task's stack to the log (`kill -USR1 <pid>`: what is a stuck process
waiting on?)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    return stop


def dump_tasks() -> None:
    """Log each pending task with the chain of coroutines it is suspended in."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    for task in tasks:
        log.warning("task stack", task=task.get_name(), stack=await_chain(task))
    log.warning("task dump done", tasks=len(tasks))


def await_chain(task: asyncio.Task[Any]) -> str:
    """`file:line in function` for each coroutine the task awaits through, outermost first."""
    lines: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(lines) < 64:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return "\n".join(lines) or repr(task)
