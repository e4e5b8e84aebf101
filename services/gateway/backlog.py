"""What each tenant has waiting in the commands stream, and its share of it at the gateway.

The gateway stores a command as fast as the broker takes it, far faster than the services
handle one; a tenant flooding its command subjects would otherwise pile a backlog into
`AGENCY_COMMANDS` that every other tenant's commands wait behind. So the gateway reads, a
few times a second, how many commands of each tenant the stream holds (each partition's, on
a log in partitions; the stream is a work
queue: a command leaves it once a service has handled it), and admits by the admission's
rule (`services/tenancy/admission.py`): while fewer than `commands_waiting` wait, nobody is
refused; beyond, a tenant with its share or more waiting (its weight's part among the
tenants with commands waiting) is answered 429 before its command is stored, with the
seconds its own excess takes to drain at the pace the services take commands up.

Commands that wait on purpose (a run's watch, a subagent's deadline, a member's retry) are
not counted: they are due later, not behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter

import structlog
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError

from agency.contracts.partitions import EventLayout, command_of_subject
from agency.services.tenancy.admission import AdmissionSettings, Refused, parse_weights, share_of

log = structlog.get_logger(__name__)

DEFERRED = frozenset({"runtime.watch", "subagents.deadline", "workflows.retry"})
_WHAT = "commands waiting for the services"
_READ_TIMEOUT = 2.0
# How fast the pace of draining follows each reading.
_PACE = 0.3


class CommandBacklog:
    """Each tenant's waiting commands, read every `every` seconds (`watching`)."""

    def __init__(
        self,
        settings: AdmissionSettings,
        *,
        layout: EventLayout | None = None,
        every: float = 0.25,
    ) -> None:
        self._layout = layout or EventLayout()
        self.enabled = settings.enabled
        self.capacity = settings.commands_waiting
        self._weights = parse_weights(settings.weights)
        self._every = every
        self.waiting: Counter[str] = Counter()
        self._read_at = 0.0
        # Commands the services take up a second, as the readings tell it.
        self.pace = 0.0

    def stored(self, tenant: str) -> None:
        """A command of the tenant was stored: counted until the next reading says more."""
        self.waiting[tenant] += 1

    def refusal(self, tenant: str) -> Refused | None:
        """Why the tenant's command may not be stored now, or None."""
        if not self.enabled or sum(self.waiting.values()) < self.capacity:
            return None
        share = share_of(self.capacity, self._weights, self.waiting, tenant)
        held = self.waiting[tenant]
        whole = max(1, math.floor(share))
        if held < whole:
            return None
        excess = held - whole + 1
        retry_after = min(60, max(1, math.ceil(excess / max(self.pace, 1.0))))
        return Refused(tenant, held, share, _WHAT, retry_after)

    async def read(self, nc: NATS) -> None:
        """How many commands of each tenant the streams hold now."""
        waiting: Counter[str] = Counter()
        for partition in range(self._layout.partitions):
            subjects = await _subjects(
                nc, self._layout.command_stream(partition), self._layout.all_commands(partition)
            )
            for subject, count in subjects.items():
                command = command_of_subject(subject)
                if command is not None and ".".join(command) not in DEFERRED:
                    waiting[subject.split(".", 2)[1]] += count
        now = time.monotonic()
        if self._read_at:
            # What waited at the last reading and was stored since, less what waits now.
            taken = max(0, sum(self.waiting.values()) - sum(waiting.values()))
            pace = taken / max(now - self._read_at, 1e-3)
            self.pace += _PACE * (pace - self.pace)
        self.waiting, self._read_at = waiting, now

    async def watching(self, nc: NATS, stop: asyncio.Event) -> None:
        """Read every `every` seconds until `stop`; a failed reading keeps the last one
        (logged once until a reading works again)."""
        failing = False
        while not stop.is_set():
            try:
                await self.read(nc)
                failing = False
            except (NatsError, TimeoutError, ValueError) as e:
                if not failing:
                    log.warning("gateway could not read the commands waiting", error=str(e))
                failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._every)  # a period


async def _subjects(nc: NATS, stream: str, subjects: str) -> dict[str, int]:
    """The count of messages on each of a stream's subjects matching `subjects`."""
    request = json.dumps({"subjects_filter": subjects}).encode()
    reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=_READ_TIMEOUT)
    info = json.loads(reply.data)
    if "error" in info:
        raise NatsError(str(info["error"].get("description", "stream info failed")))
    found: dict[str, int] = info.get("state", {}).get("subjects") or {}
    return found
