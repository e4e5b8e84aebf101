"""The worker an isolated tool runs in, started under bwrap by the tools service.

    python -I -B services/sandbox/runner.py ROOT...

The ROOTs (where the project's packages are) go first on `sys.path`. The worker reads one
`SandboxCall` from stdin, sets its limits on itself (CPU time, address space, no core
dumps), replaces its environment with the call's, imports the tool's function by name, runs
it and writes one outcome to stdout. Anything the tool prints goes to stderr, so it cannot
forge the outcome. It exits at once after writing, whatever threads the tool left running.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agency.services.sandbox.protocol import SandboxCall, SandboxOutcome


def main() -> None:
    # The outcome goes to the real stdout; the tool's prints go to stderr.
    outcome_fd = os.dup(1)
    os.dup2(2, 1)
    sys.path[:0] = sys.argv[1:]
    from agency.services.sandbox.protocol import Raised, call_decoder, call_encoder

    data = sys.stdin.buffer.read()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    try:
        outcome: SandboxOutcome = run(call_decoder.decode(data))
    except Exception as e:  # a broken call: say so rather than die without a word
        outcome = Raised(error=f"the sandboxed worker could not run the call ({describe(e)})")
    payload = call_encoder.encode(outcome)
    while payload:
        payload = payload[os.write(outcome_fd, payload) :]
    sys.stderr.flush()
    os._exit(0)


def run(call: SandboxCall) -> SandboxOutcome:
    """Run the call under its limits; every way it can end becomes an outcome."""
    import asyncio
    import inspect

    from agency.contracts.limits import truncate_text
    from agency.services.agents.isolation import resolve
    from agency.services.agents.tools import ToolContext, ToolFailed, ToolRetryable, result_text
    from agency.services.agents.tracebacks import formatted, where
    from agency.services.sandbox.protocol import Failed, OutOfMemory, Raised, Retryable, Returned

    confine(call.env, call.cpu_seconds, call.memory_bytes)
    try:
        fn = resolve(call.module, call.qualname)
        context = ToolContext(
            tenant_id=call.tenant_id,
            agency_id=call.agency_id,
            thread_id=call.thread_id,
            run_id=call.run_id,
            call_id=call.call_id,
            attempt=call.attempt,
        )
        result: Any = fn(call.arguments, context)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return Returned(output=truncate_text(result_text(result), call.max_output_bytes))
    except MemoryError:
        return OutOfMemory()
    except ToolFailed as e:
        return Failed(message=str(e) or describe(e))
    except ToolRetryable as e:
        return Retryable(message=describe(e))
    except BaseException as e:  # SystemExit and KeyboardInterrupt included: still one outcome
        return Raised(error=describe(e), raised_at=where(e), traceback=formatted(e))


def confine(env: dict[str, str], cpu_seconds: int, memory_bytes: int) -> None:
    """Replace the environment with `env` and set the worker's limits on itself (the
    isolated code agents' worker, `agent_runner.py`, does the same)."""
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = "/scratch"  # /tmp may hold the code's read-only binds instead
    set_limits(cpu_seconds, memory_bytes)


def set_limits(cpu_seconds: int, memory_bytes: int) -> None:
    import math
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The limit is the code's own: the CPU the worker spent starting (the interpreter,
    # its imports) is added to it, whole seconds as the kernel counts them. At the soft
    # limit the kernel sends SIGXCPU (which ends the process); code that catches it is
    # killed at the hard limit a second later.
    spent = resource.getrusage(resource.RUSAGE_SELF)
    limit = math.ceil(spent.ru_utime + spent.ru_stime) + cpu_seconds
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


async def _awaited(value: Any) -> Any:
    return await value


def describe(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


if __name__ == "__main__":
    main()
