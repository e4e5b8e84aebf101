"""Errors raised while launching embedded NATS and PostgreSQL servers."""

from __future__ import annotations

from collections.abc import Sequence

from agency.contracts.errors import StructuredError


def _with_log(message: str, log_tail: str) -> str:
    if not log_tail.strip():
        return message
    return f"{message}\n--- last lines of the log ---\n{log_tail.rstrip()}"


class LaunchError(StructuredError, init=False):
    """Base class of every error raised by `infra.launch`."""


class BinaryNotFound(LaunchError):
    """A server binary is missing where we looked for it."""

    component: str
    path: str
    hint: str
    message = "{component}: no executable at {path}; {hint}"


class StartTimeout(LaunchError):
    """The server process runs but did not become ready in time."""

    component: str
    seconds: float
    log_tail: str
    message = (
        "{component} did not become ready within {seconds:g} s; "
        "read its log below, or raise the start timeout on a slow machine"
    )

    def describe(self) -> str:
        return _with_log(super().describe(), self.log_tail)


class ProcessExited(LaunchError):
    """The server process exited while we were waiting for it to become ready."""

    component: str
    returncode: int
    log_tail: str
    message = "{component} exited with code {returncode} during start"

    def describe(self) -> str:
        return _with_log(super().describe(), self.log_tail)


class PortInUse(ProcessExited):
    """The server exited because one of its ports was taken (retried when we chose the port)."""


class CommandFailed(LaunchError):
    """A one-shot helper command (such as initdb) failed or hung."""

    component: str
    argv: Sequence[str]
    returncode: int | None
    log_tail: str

    def __post_init__(self) -> None:
        self.argv = tuple(self.argv)
        super().__post_init__()

    def describe(self) -> str:
        code = self.returncode
        outcome = "timed out" if code is None else f"exited with code {code}"
        return _with_log(f"{self.component}: `{' '.join(self.argv)}` {outcome}", self.log_tail)


class StopTimeout(LaunchError):
    """The process outlived SIGKILL by more than the bounded wait (likely stuck in D state)."""

    component: str
    pid: int
    seconds: float
    message = (
        "{component} (pid {pid}) was still running {seconds:g} s after SIGKILL; "
        "check the process state with `ps -o stat -p {pid}`"
    )


class BackendUnavailable(LaunchError):
    """The requested backend (testcontainers / Docker) cannot be used here."""

    backend: str
    reason: str
    message = "{backend} backend unavailable: {reason}"
