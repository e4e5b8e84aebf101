"""structlog, configured once per process: JSON off a tty, console on one."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

_configured = False


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is at the time, so a swapped stream (a test's
    capture, a daemon's redirect) never leaves loggers holding a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    fmt: Literal["json", "console", "auto"] = "auto", level: int = logging.INFO
) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
