"""Ctrl-C and SIGTERM as an event a foreground command waits on."""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
