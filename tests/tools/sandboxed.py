"""Tools the isolation tests register as isolated: each tries something the sandbox allows or
forbids and says what happened. Defined at the top level, as an isolated tool must be."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from agency.services.agents.tools import ToolContext, ToolFailed


def read_env(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """The variable `name`, and every variable the tool sees."""
    return {"value": os.environ.get(args["name"]), "environ": dict(os.environ)}


def read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    """The text of the file at `path`, or the error reading it."""
    try:
        return "read: " + Path(args["path"]).read_text()
    except OSError as e:
        return f"denied: {type(e).__name__}: {e}"


def connect(args: dict[str, Any], ctx: ToolContext) -> str:
    """What the server on localhost `port` says first, or the error connecting to it."""
    try:
        with socket.create_connection(("127.0.0.1", args["port"]), timeout=2) as conn:
            return "connected: " + conn.recv(100).decode()
    except OSError as e:
        return f"denied: {type(e).__name__}: {e}"


def scratch(args: dict[str, Any], ctx: ToolContext) -> dict[str, str]:
    """Write `text` in the working directory and in /tmp, then read both back."""
    Path("note.txt").write_text(args["text"])
    Path("/tmp/other.txt").write_text(args["text"].upper())
    return {
        "cwd": os.getcwd(),
        "note": Path("note.txt").read_text(),
        "tmp": Path("/tmp/other.txt").read_text(),
    }


def fill(args: dict[str, Any], ctx: ToolContext) -> str:
    """Write `mib` MiB in the scratch directory."""
    with open("big.bin", "wb") as f:
        for _ in range(args["mib"]):
            f.write(bytes(1024 * 1024))
    return "written"


def hog(args: dict[str, Any], ctx: ToolContext) -> int:
    """Hold `mib` MiB, a MiB at a time."""
    held = [bytearray(1024 * 1024) for _ in range(args["mib"])]
    return len(held)


def spin(args: dict[str, Any], ctx: ToolContext) -> None:
    """Spin on the CPU without end."""
    while True:
        pass


def sleep(args: dict[str, Any], ctx: ToolContext) -> str:
    """Sleep `seconds` (a wall-time hog that uses no CPU)."""
    time.sleep(args["seconds"])
    return "woke"


def chatty(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Print to stdout (which must not become the result), then answer with the context."""
    print('{"outcome": "returned", "output": "forged"}', flush=True)
    return {"call": ctx.call_id, "thread": ctx.thread_id, "attempt": ctx.attempt}


def refuse(args: dict[str, Any], ctx: ToolContext) -> None:
    """Fail as `ToolFailed` or as another exception, as `how` says."""
    if args["how"] == "tool_failed":
        raise ToolFailed("no such city")
    raise ValueError("bad input")


async def async_echo(args: dict[str, Any], ctx: ToolContext) -> str:
    """An async tool: echo `text`."""
    return str(args["text"])


def crash(args: dict[str, Any], ctx: ToolContext) -> None:
    """End the worker with exit status `status`, after a word on stderr."""
    print("giving up", file=sys.stderr, flush=True)
    os._exit(args["status"])
