"""Errors raised while launching embedded NATS and PostgreSQL servers."""

from __future__ import annotations

from collections.abc import Sequence


def _with_log(message: str, log_tail: str) -> str:
    if not log_tail.strip():
        return message
    return f"{message}\n--- last lines of the log ---\n{log_tail.rstrip()}"


class LaunchError(Exception):
    """Base class of every error raised by `infra.launch`."""


class BinaryNotFound(LaunchError):
    """A server binary is missing where we looked for it."""

    def __init__(self, component: str, path: str, hint: str) -> None:
        self.component = component
        self.path = path
        self.hint = hint
        super().__init__(f"{component}: no executable at {path}; {hint}")


class StartTimeout(LaunchError):
    """The server process runs but did not become ready in time."""

    def __init__(self, component: str, seconds: float, log_tail: str) -> None:
        self.component = component
        self.seconds = seconds
        self.log_tail = log_tail
        super().__init__(
            _with_log(
                f"{component} did not become ready within {seconds:g} s; "
                "read its log below, or raise the start timeout on a slow machine",
                log_tail,
            )
        )


class ProcessExited(LaunchError):
    """The server process exited while we were waiting for it to become ready."""

    def __init__(self, component: str, returncode: int, log_tail: str) -> None:
        self.component = component
        self.returncode = returncode
        self.log_tail = log_tail
        super().__init__(
            _with_log(f"{component} exited with code {returncode} during start", log_tail)
        )


class PortInUse(ProcessExited):
    """The server exited because one of its ports was taken (retried when we chose the port)."""


class CommandFailed(LaunchError):
    """A one-shot helper command (such as initdb) failed or hung."""

    def __init__(
        self, component: str, argv: Sequence[str], returncode: int | None, log_tail: str
    ) -> None:
        self.component = component
        self.argv = tuple(argv)
        self.returncode = returncode
        self.log_tail = log_tail
        outcome = "timed out" if returncode is None else f"exited with code {returncode}"
        super().__init__(_with_log(f"{component}: `{' '.join(argv)}` {outcome}", log_tail))


class StopTimeout(LaunchError):
    """The process outlived SIGKILL by more than the bounded wait (likely stuck in D state)."""

    def __init__(self, component: str, pid: int, seconds: float) -> None:
        self.component = component
        self.pid = pid
        self.seconds = seconds
        super().__init__(
            f"{component} (pid {pid}) was still running {seconds:g} s after SIGKILL; "
            f"check the process state with `ps -o stat -p {pid}`"
        )


class BackendUnavailable(LaunchError):
    """The requested backend (testcontainers / Docker) cannot be used here."""

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(f"{backend} backend unavailable: {reason}")
