"""Running an isolated tool: one worker process per call, started under bubblewrap.

The worker (`services/sandbox/runner.py`) sees the interpreter, its virtual environment and
the project's packages read-only, a private tmpfs scratch directory as its working
directory (and /tmp), a /proc and /dev of its own, and nothing else of the host: not the
service's data directory, not its environment (only `Isolation.env`), and no network
unless `Isolation.network` (a new network namespace otherwise). It sets its CPU time and
address-space limits on itself before importing the tool; the executor's timeout is its
wall time. On a timeout or a cancel the worker is killed with its process group; bwrap's
`--die-with-parent` and its own PID namespace take everything the tool started with it.

Every way a call can end becomes the tool's result or a `ToolFailed`/`ToolRetryable` whose
message the model reads. Without bwrap an isolated tool fails; it never runs unsandboxed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec

from agency.contracts.limits import limits
from agency.services.agents.isolation import MIB, Isolation, NotIsolatable, function_reference
from agency.services.agents.tools import Tool, ToolContext, ToolFailed, ToolRetryable
from agency.services.agents.tracebacks import RaisedElsewhere
from agency.services.sandbox import runner
from agency.services.sandbox.protocol import (
    Failed,
    OutOfMemory,
    Raised,
    Retryable,
    Returned,
    SandboxCall,
    call_encoder,
    outcome_decoder,
)

BWRAP = "bwrap"
RUNNER = Path(runner.__file__).resolve()
SCRATCH = "/scratch"
# The project's package, which the worker imports besides the tool's own.
PROJECT_PACKAGES = ("agency",)
# Files a tool allowed on the network needs to resolve names and check certificates.
NETWORK_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
)
_KILL_WAIT = 5.0
_STDERR_TAIL = 2000


async def run_isolated(tool: Tool, args: dict[str, Any], context: ToolContext) -> str:
    """Run `tool` in a sandboxed worker; its result text, or a `ToolFailed` saying why not."""
    isolation = tool.isolation
    assert isolation is not None
    try:
        bwrap = bubblewrap(f"isolated tool {tool.name!r}", "the tools service", "tool")
        module, qualname = function_reference(tool.name, tool.fn)
    except (NoSandbox, NotIsolatable) as e:
        raise ToolFailed(str(e)) from e
    max_output = limits().max_tool_output_bytes
    call = SandboxCall(
        module=module,
        qualname=qualname,
        arguments=args,
        tenant_id=context.tenant_id,
        agency_id=context.agency_id,
        thread_id=context.thread_id,
        run_id=context.run_id,
        call_id=context.call_id,
        attempt=context.attempt,
        env=dict(isolation.env),
        cpu_seconds=isolation.cpu_seconds,
        memory_bytes=isolation.memory_bytes,
        max_output_bytes=max_output,
    )
    process = await start_sandboxed(bwrap, isolation, module)
    try:
        stdout, stderr = await _exchange(
            process, call_encoder.encode(call), tool.name, 6 * max_output + 64 * 1024
        )
        returncode = await process.wait()
    finally:
        await kill_group(process)
    return outcome_text(tool.name, isolation, returncode, stdout, stderr)


class NoSandbox(Exception):
    """Bubblewrap is not installed: nothing isolated runs without its sandbox."""


def bubblewrap(what: str, where: str, kind: str) -> str:
    """The path of bubblewrap, which `what` (an isolated `kind`) runs in; `NoSandbox` when
    it is not installed where `where` runs."""
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        raise NoSandbox(
            f"{what} cannot run: bubblewrap ({BWRAP}) is not installed where {where} runs, "
            f"and an isolated {kind} never runs without its sandbox"
        )
    return bwrap


async def start_sandboxed(
    bwrap: str, isolation: Isolation, module: str, runner: Path = RUNNER, **options: Any
) -> asyncio.subprocess.Process:
    """The worker `runner` started in its sandbox (`sandbox_command`) in a session of its
    own, with an empty environment and its pipes open; `options` go to the subprocess."""
    return await asyncio.create_subprocess_exec(
        *sandbox_command(bwrap, isolation, module, runner),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env={},
        **options,
    )


def sandbox_command(
    bwrap: str, isolation: Isolation, module: str, runner: Path = RUNNER
) -> list[str]:
    """The bwrap command line running the worker `runner` (an isolated tool's, or an
    isolated code agent's) for code of `module`."""
    code = code_paths(module)
    command = [
        bwrap,
        "--unshare-all",
        *(["--share-net"] if isolation.network else []),
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            command += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            command += ["--ro-bind", top, top]
    etc = ("/etc/ld.so.cache", *(NETWORK_FILES if isolation.network else ()))
    for path in etc:
        command += ["--ro-bind-try", path, path]
    bound = _outermost([*python_paths(), *code, *linked_paths(code)])
    for path in bound:
        command += ["--ro-bind", str(path), str(path)]
    # /tmp is the scratch directory too, unless the code itself lives under /tmp (then
    # /tmp holds its read-only binds, and TMPDIR names the scratch directory).
    tmp = Path("/tmp")
    scratch_tmp = [] if any(p == tmp or tmp in p.parents for p in bound) else [
        "--symlink", SCRATCH, "/tmp"
    ]  # fmt: skip
    command += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(isolation.scratch_mib * MIB),
        "--tmpfs",
        SCRATCH,
        *scratch_tmp,
        "--chdir",
        SCRATCH,
    ]
    roots = list(dict.fromkeys(str(path.parent) for path in code))
    return [*command, sys.executable, "-I", "-B", str(runner), *roots]


def python_paths() -> list[Path]:
    """The interpreter and its environment: the venv, the installation it was made from."""
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    paths.add(str(Path(sys.executable).resolve().parent))
    return [Path(os.path.abspath(p)) for p in sorted(paths)]


def code_paths(module: str) -> list[Path]:
    """The directories (or module files) of the project's packages and the tool's own."""
    paths: list[Path] = []
    for top in dict.fromkeys((*PROJECT_PACKAGES, module.partition(".")[0])):
        imported = sys.modules.get(top)
        if imported is None:
            continue
        file = getattr(imported, "__file__", None)
        if file is not None:
            path = Path(os.path.abspath(file))
            paths.append(path.parent if path.name == "__init__.py" else path)
        else:  # a namespace package
            paths.extend(Path(os.path.abspath(p)) for p in getattr(imported, "__path__", ()))
    return paths


def linked_paths(code: list[Path]) -> list[Path]:
    """Where the links inside these directories lead: in a source checkout the layers are
    linked into the package (agency/services -> ../services), and the worker follows them."""
    return [
        child.resolve()
        for path in code
        if path.is_dir()
        for child in path.iterdir()
        if child.is_symlink()
    ]


def outcome_text(
    name: str, isolation: Isolation, returncode: int, stdout: bytes, stderr: bytes
) -> str:
    """The result text of a finished worker, or the exception saying how it failed."""
    try:
        outcome = outcome_decoder.decode(stdout) if stdout else None
    except msgspec.DecodeError as e:
        raise ToolFailed(
            f"isolated tool {name!r} answered with an unreadable result ({e}; exit status "
            f"{returncode})"
        ) from e
    match outcome:
        case Returned(output=output):
            return output
        case Failed(message=message):
            raise ToolFailed(message)
        case Retryable(message=message):
            raise ToolRetryable(message)
        case Raised(error=error, raised_at=raised_at, traceback=traceback):
            raise RaisedElsewhere(error, raised_at, traceback)
        case OutOfMemory():
            raise ToolFailed(memory_message(f"isolated tool {name!r}", isolation))
    raise ToolFailed(ended_message(f"isolated tool {name!r}", isolation, returncode, stderr))


def memory_message(what: str, isolation: Isolation) -> str:
    return f"{what} exceeded its memory limit of {isolation.memory_mib} MiB"


def ended_message(what: str, isolation: Isolation, returncode: int, stderr: bytes) -> str:
    """Why a worker ended without an outcome: a limit, its sandbox, or a crash. `what`
    names the worker's code ("isolated tool 'x'")."""
    text = stderr.decode(errors="replace").strip()
    # bwrap exits with 128 + the signal that ended the worker.
    signum = returncode - 128 if returncode > 128 else -returncode if returncode < 0 else 0
    if signum in (signal.SIGXCPU, signal.SIGKILL):
        return f"{what} exceeded its CPU time limit of {isolation.cpu_seconds} s"
    if "MemoryError" in text or "Cannot allocate memory" in text:
        return memory_message(what, isolation)
    if text.startswith("bwrap:"):
        problem = text.splitlines()[0]
        return f"{what} could not start its sandbox ({problem}); it never runs without one"
    how = f"exit status {returncode}"
    if signum:
        with contextlib.suppress(ValueError):
            how = f"signal {signal.Signals(signum).name}"
    tail = text[-_STDERR_TAIL:]
    return f"{what} ended without a result ({how})" + (f": {tail}" if tail else "")


async def _exchange(
    process: asyncio.subprocess.Process, call: bytes, name: str, cap: int
) -> tuple[bytes, bytes]:
    """Send the call; read the outcome (at most `cap` bytes) and the tail of stderr."""
    assert process.stdin and process.stdout and process.stderr

    async def send() -> None:
        assert process.stdin
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(call)
            await process.stdin.drain()
            process.stdin.close()

    async def outcome() -> bytes:
        assert process.stdout
        data = bytearray()
        while chunk := await process.stdout.read(64 * 1024):
            data += chunk
            if len(data) > cap:
                raise ToolFailed(f"isolated tool {name!r} wrote more than {cap} bytes of result")
        return bytes(data)

    async def errors() -> bytes:
        assert process.stderr
        tail = b""
        while chunk := await process.stderr.read(64 * 1024):
            tail = (tail + chunk)[-4 * _STDERR_TAIL :]
        return tail

    _, stdout, stderr = await asyncio.gather(send(), outcome(), errors())
    return stdout, stderr


async def kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the worker's process group unless it has ended; wait for it, within a bound."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), _KILL_WAIT)


def _outermost(paths: list[Path]) -> list[Path]:
    """`paths` without those /usr or another of them already holds, parents first."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: len(p.parts)):
        if path.is_relative_to("/usr") or any(path.is_relative_to(k) for k in kept):
            continue
        if path.exists():
            kept.append(path)
    return kept
