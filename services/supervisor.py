"""Supervision: each service runs as a task of its own, restarted with backoff when it fails.

One service's failure never takes the others down. A service that raises (or returns before
`stop`) is logged and restarted after a delay that grows with its consecutive failures
(`RetryPolicy.delay`); one that ran for `stable_after` seconds starts counting afresh. Its
state is what `/readyz` shows: `starting` until its first start, `running`, `restarting`
between a failure and the next start, `stopped` once `stop` is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from agency.infra.retry import RetryPolicy, sleep_until_stopped

log = structlog.get_logger(__name__)

ServiceRunner = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
ServiceState = Literal["starting", "running", "restarting", "stopped"]

# Restarts: 0.5 s, 1 s, 2 s, … up to 30 s between attempts, as long as the failure lasts.
RESTART_POLICY = RetryPolicy(
    attempts=None, timeout=None, wait_initial=0.5, wait_max=30.0, wait_jitter=0.5
)


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    state: ServiceState
    restarts: int
    last_error: str | None


class Supervisor:
    """Runs `runners` until `stop` is set; `statuses()` tells how each is doing."""

    def __init__(
        self,
        runners: Mapping[str, ServiceRunner],
        *,
        policy: RetryPolicy = RESTART_POLICY,
        stable_after: float = 60.0,
    ) -> None:
        self._runners = dict(runners)
        self._policy = policy
        self._stable_after = stable_after
        self._statuses = {name: ServiceStatus("starting", 0, None) for name in self._runners}

    def statuses(self) -> dict[str, ServiceStatus]:
        return dict(self._statuses)

    def states(self) -> dict[str, str]:
        """Each service's state, as `/readyz` shows it."""
        return {name: status.state for name, status in self._statuses.items()}

    async def run(self, stop: asyncio.Event) -> None:
        """Return once `stop` is set and every service has stopped."""
        async with asyncio.TaskGroup() as tg:
            for name, runner in self._runners.items():
                tg.create_task(self._supervise(name, runner, stop), name=f"supervise-{name}")

    async def _supervise(self, name: str, runner: ServiceRunner, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        restarts = 0
        error: str | None = None
        while not stop.is_set():
            self._statuses[name] = ServiceStatus("running", restarts, error)
            started = loop.time()
            failed: Exception | None = None
            try:
                await runner(stop)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                if stop.is_set():
                    log.warning("service failed while stopping", service=name, error=error)
                    break
                failed = e
            else:
                if stop.is_set():
                    break
                error = "returned before it was told to stop"
            if loop.time() - started >= self._stable_after:
                failures = 0
            failures += 1
            restarts += 1
            delay = self._policy.delay(failures)
            self._statuses[name] = ServiceStatus("restarting", restarts, error)
            log.error(
                "service failed, restarting",
                service=name,
                error=error,
                restart_in=round(delay, 2),
                restarts=restarts,
                exc_info=failed,
            )
            await sleep_until_stopped(stop, delay)
        self._statuses[name] = ServiceStatus("stopped", restarts, error)
