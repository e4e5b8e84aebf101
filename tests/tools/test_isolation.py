"""Isolated tools without NATS: what an operator may mark isolated, the worker's command line,
and the message each way a worker can end gives the model."""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agency.services.agents.isolation import Isolation, NotIsolatable
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, ToolFailed, ToolRetryable, define_tool
from agency.services.agents.tracebacks import MAX_TRACEBACK_CHARS, RaisedElsewhere
from agency.services.sandbox.host import outcome_text, run_isolated, sandbox_command
from tests.tools import sandboxed

PROJECT = Path(__file__).resolve().parents[2]
CONTEXT = ToolContext(tenant_id="t", agency_id="a", thread_id="th", run_id="r", call_id="c")
LIMITS = Isolation(cpu_seconds=2, memory_mib=64)


def test_a_top_level_function_can_be_isolated_and_keeps_its_isolation() -> None:
    system = AgentSystem().add_tool(define_tool(sandboxed.scratch), ["t"], isolation=LIMITS)
    tool = system.external_tool("scratch")
    assert tool is not None and tool.isolation == LIMITS


def test_a_function_no_import_reaches_cannot_be_isolated() -> None:
    def local(args: dict[str, Any], ctx: ToolContext) -> str:
        return "inner"

    with pytest.raises(NotIsolatable, match=r"tool 'local' cannot be isolated: .*top level"):
        AgentSystem().add_tool(define_tool(local), isolation=Isolation())
    with pytest.raises(NotIsolatable, match=r"tool 'anon' cannot be isolated"):
        AgentSystem().add_tool(define_tool(lambda a, c: "x", name="anon"), isolation=Isolation())
    AgentSystem().add_tool(define_tool(local))  # not isolated: runs in the service as before


@pytest.mark.parametrize(
    "options",
    [{"cpu_seconds": 0}, {"memory_mib": -1}, {"scratch_mib": 1.5}, {"env": {"A=B": "c"}}],
    ids=["no-cpu", "negative-memory", "fractional-scratch", "bad-env-name"],
)
def test_isolation_refuses_limits_that_mean_nothing(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Isolation"):
        Isolation(**options)


def test_the_worker_sees_the_project_packages_not_the_project_or_its_data() -> None:
    command = sandbox_command("bwrap", Isolation(), "tests.tools.sandboxed")
    binds = {command[i + 1] for i, arg in enumerate(command) if arg == "--ro-bind"}
    assert {str(PROJECT / p) for p in ("services", "contracts", "infra", "tests")} <= binds
    assert str(PROJECT) not in binds
    assert "--share-net" not in command and "/etc/resolv.conf" not in command
    assert command[command.index("--chdir") + 1] == "/scratch"
    assert command[command.index("--tmpfs") - 1] == str(64 * 1024 * 1024)
    assert command[-1] == str(PROJECT)  # on the worker's sys.path


def test_a_tool_allowed_on_the_network_shares_the_hosts_and_resolves_names() -> None:
    command = sandbox_command("bwrap", Isolation(network=True), "tests.tools.sandboxed")
    assert "--share-net" in command and "/etc/resolv.conf" in command


@pytest.mark.parametrize(
    ("returncode", "stdout", "stderr", "error"),
    [
        (128 + 24, b"", b"", "isolated tool 'x' exceeded its CPU time limit of 2 s"),
        (128 + 9, b"", b"", "isolated tool 'x' exceeded its CPU time limit of 2 s"),
        (
            1,
            b"",
            b"bwrap: Creating new namespace failed: Operation not permitted\n",
            "isolated tool 'x' could not start its sandbox (bwrap: Creating new namespace "
            "failed: Operation not permitted); it never runs without one",
        ),
        (
            128 + 6,
            b"",
            b"Fatal Python error: MemoryError",
            "isolated tool 'x' exceeded its memory limit of 64 MiB",
        ),
        (
            128 + 11,
            b"",
            b"boom",
            "isolated tool 'x' ended without a result (signal SIGSEGV): boom",
        ),
        (0, b"", b"", "isolated tool 'x' ended without a result (exit status 0)"),
        (
            0,
            b"{not json",
            b"",
            "isolated tool 'x' answered with an unreadable result (JSON is malformed: "
            "object keys must be strings (byte 1); exit status 0)",
        ),
        (
            0,
            b'{"outcome": "out_of_memory"}',
            b"",
            "isolated tool 'x' exceeded its memory limit of 64 MiB",
        ),
    ],
    ids=[
        "sigxcpu",
        "sigkill",
        "no-sandbox",
        "fatal-memory",
        "segfault",
        "silent",
        "garbled",
        "out-of-memory",
    ],
)
def test_a_worker_that_ends_without_a_result_says_why(
    returncode: int, stdout: bytes, stderr: bytes, error: str
) -> None:
    with pytest.raises(ToolFailed) as failed:
        outcome_text("x", LIMITS, returncode, stdout, stderr)
    assert str(failed.value) == error


def test_outcomes_the_tool_chose_keep_their_kind() -> None:
    assert outcome_text("x", LIMITS, 0, b'{"outcome": "returned", "output": "ok"}', b"") == "ok"
    with pytest.raises(ToolRetryable, match=r"^ConnectionError: later$"):
        outcome_text(
            "x", LIMITS, 0, b'{"outcome": "retryable", "message": "ConnectionError: later"}', b""
        )


def test_a_raised_outcome_keeps_where_and_a_bounded_traceback() -> None:
    """What the worker says of a raise is bounded: it runs code that is not trusted."""
    raised = (
        b'{"outcome": "raised", "error": "KeyError: 1", "raised_at": "app.py, line 3, in f", '
        b'"traceback": "' + b"x" * (MAX_TRACEBACK_CHARS * 2) + b'"}'
    )
    with pytest.raises(RaisedElsewhere) as failed:
        outcome_text("x", LIMITS, 0, raised, b"")
    assert (failed.value.error, failed.value.raised_at) == ("KeyError: 1", "app.py, line 3, in f")
    assert failed.value.traceback == "…" + "x" * MAX_TRACEBACK_CHARS


async def test_a_crashing_worker_answers_with_its_status_and_words() -> None:
    tool = replace(define_tool(sandboxed.crash), isolation=LIMITS)
    with pytest.raises(ToolFailed) as failed:
        await run_isolated(tool, {"status": 3}, CONTEXT)
    assert (
        str(failed.value)
        == "isolated tool 'crash' ended without a result (exit status 3): giving up"
    )


async def test_a_sandbox_that_cannot_start_fails_the_call_with_bwraps_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where bwrap cannot make namespaces (a locked-down container), the call fails."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    tool = replace(define_tool(sandboxed.scratch), isolation=LIMITS)
    with pytest.raises(ToolFailed) as failed:
        await run_isolated(tool, {"text": "x"}, CONTEXT)
    assert str(failed.value) == (
        "isolated tool 'scratch' could not start its sandbox (bwrap: No permissions to "
        "creating new namespace); it never runs without one"
    )


async def test_the_scratch_directory_holds_no_more_than_its_size() -> None:
    tool = replace(define_tool(sandboxed.fill), isolation=replace(LIMITS, scratch_mib=4))
    assert await run_isolated(tool, {"mib": 3}, CONTEXT) == "written"
    with pytest.raises(ToolFailed, match=r"^OSError: \[Errno 28\] No space left on device"):
        await run_isolated(tool, {"mib": 8}, CONTEXT)
