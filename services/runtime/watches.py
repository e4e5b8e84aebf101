"""The runtime's side of the watchdog (`watchdog.py` judges): the watches a command arms,
sent as `runtime.watch` commands, and what a delivered watch does with its run.

A watch is deferred (a negative acknowledgement with a delay) while its run may still
move, re-sent afresh before the broker's delivery limit, and acts when the run stalled:
it drives the thread again, or ends the run with `run.error` of kind `stalled`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import structlog

from agency.contracts.commands import ApproveToolCalls, CommandEnvelope, InvokeThread, WatchRun
from agency.contracts.envelope import utc_now
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.commandbus import Defer, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leases import Leases
from agency.services.runtime import watchdog
from agency.services.runtime.loop import ThreadDriver
from agency.services.threads.caches import ThreadCache

log = structlog.get_logger(__name__)

# A watch is re-sent before the broker's delivery limit for the runtime's commands.
_WATCH_RENEW_AT = 4


def lease_key(tenant: str, thread_id: str) -> str:
    """The key of a thread's lease in the leases bucket."""
    return f"thread.{tenant}.{thread_id}"


@dataclass(eq=False)
class RunWatches:
    bus: Bus
    threads: ThreadCache
    leases: Leases
    driver: ThreadDriver
    settings: watchdog.WatchSettings
    drive_soon: Callable[[str, str], None]

    @staticmethod
    def arming(envelope: CommandEnvelope, command: object, state: ThreadState) -> list[WatchRun]:
        """The watches a command arms: an invoke's run (on every delivery, even one that
        decides nothing, in case the first delivery stored the request and died), and a run
        parked on an approval, which gave its watch up, once the approval resumes it."""
        watches = []
        if isinstance(command, InvokeThread):
            watches.append(
                WatchRun(
                    agency_id=command.agency_id, thread_id=command.thread_id, run_id=command.run_id
                )
            )
        resumed = state.active_run_id
        if isinstance(command, ApproveToolCalls) and resumed and command.run_id in (None, resumed):
            # On a redelivery the approval decides nothing (it is in the log already), but the
            # watch may not have been sent: sent again, the broker keeps one.
            watches.append(
                WatchRun(
                    agency_id=command.agency_id,
                    thread_id=command.thread_id,
                    run_id=resumed,
                    epoch=envelope.command_id,
                )
            )
        return watches

    async def send_all(self, tenant: str, watches: list[WatchRun]) -> None:
        for watch in watches:
            await self.send(tenant, watch)

    async def send(self, tenant: str, watch: WatchRun) -> None:
        epoch = f"{watch.epoch}:" if watch.epoch else ""
        await self.bus.commands.send(
            tenant, watch, idempotency_key=f"watch:{watch.run_id}:{epoch}{watch.generation}"
        )

    async def handle(self, tenant: str, watch: WatchRun, delivery: Delivery) -> None:
        """A delivered watch: judged (`watchdog.verdict`) and acted on; deferred while the
        run may still move."""
        key = lease_key(tenant, watch.thread_id)
        judged: watchdog.Verdict
        if self.driver.driving(tenant, watch.thread_id):
            # Driven here right now (an invoke's watch arrives while its run starts): not
            # stalled, as when another worker holds the lease, and a drive that hangs is
            # stopped by its own bound (`DriveStalled`). Looked at again later.
            judged = watchdog.Later(self.settings.stall_after)
        else:
            state = await self.threads.load(tenant, watch.thread_id)
            leased = await self.leases.holder(key) is not None
            judged = watchdog.verdict(state, watch.run_id, utc_now(), leased, self.settings)
        match judged:
            case watchdog.Done():
                return
            case watchdog.Parked():
                log.info("watch given up until a person decides", run=watch.run_id)
                return
            case watchdog.Later(seconds=seconds):
                pass
            case watchdog.Resume(seconds=seconds):
                log.info("watchdog resumes a run", thread_id=watch.thread_id, run=watch.run_id)
                self.drive_soon(tenant, watch.thread_id)
            case watchdog.End(reason=reason):
                ended = await self.leases.run_owned(
                    key, lambda: self._end_watched(tenant, watch, reason)
                )
                if ended:
                    return
                # Someone drives it after all, or the run is not the one to end yet.
                seconds = self.settings.stall_after
        if delivery.attempt >= _WATCH_RENEW_AT:
            # The broker delivers a message a bounded number of times: carry on afresh.
            await self.send(tenant, msgspec.structs.replace(watch, generation=watch.generation + 1))
            return
        raise Defer(seconds)

    async def _end_watched(self, tenant: str, watch: WatchRun, reason: str) -> bool:
        state = await self.threads.load(tenant, watch.thread_id)
        run = state.run(watch.run_id)
        if run is None or run.terminal:
            return True
        head = state.queue[0].run_id if state.queue else None
        if state.active_run_id != watch.run_id and head != watch.run_id:
            return False
        log.warning("watchdog ends a stalled run", thread_id=watch.thread_id, run=watch.run_id)
        await self.driver.end_run(tenant, watch.thread_id, "stalled", reason)
        return True
