"""Every projection of the projector fed by one reader, each batch committed for all of them
in one transaction.

Each projection still has its own checkpoint, tables and positions, and applies only what
its checkpoint does not cover (so projections at different points, after a rebuild or a
poison event, catch up from the group's lowest checkpoint). What the group saves is the
per-projection overhead of a batch: one reader decoding the log instead of one per
projection, and one transaction (one WAL flush at commit) instead of one per projection.

A batch that fails in the database is committed again projection by projection with each
runner's own handling, which pins a poison event to the projection that cannot apply it
and dead-letters it there, as a lone runner would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
from nats.js import JetStreamContext

from agency.contracts.partitions import EventLayout, checkpoint_name
from agency.infra.jetstream.deadletter import DeadLetters
from agency.infra.jetstream.reader import Delivered
from agency.projections.engine import (
    CHECKPOINTS,
    LIVE_SCHEMA,
    Moved,
    ProjectionRunner,
    announce_progress,
    apply_events,
    move_checkpoints,
    past,
    schema_path,
)
from agency.projections.errors import CommitsLost, ProjectionGap
from agency.projections.follower import LogFollower
from agency.projections.positions import advance_positions
from agency.projections.projection import Projection
from agency.projections.tenancy import AS_PROJECTOR


class ProjectionGroup(LogFollower):
    def __init__(
        self,
        pool: asyncpg.Pool,
        js: JetStreamContext,
        projections: Sequence[Projection],
        *,
        dead_letters: DeadLetters,
        batch: int = 1000,
        layout: EventLayout | None = None,
        partition: int = 0,
    ) -> None:
        """`layout`, `partition`: on a log of several partitions, the one the group follows
        (a group per partition, each projection with a checkpoint per partition)."""
        layout = layout or EventLayout()
        name = checkpoint_name("+".join(p.name for p in projections), partition)
        super().__init__(
            pool,
            js,
            name,
            batch=batch,
            stream=layout.stream(partition),
            filter_subject=layout.all_events(partition),
        )
        self.runners = [
            ProjectionRunner(
                pool,
                js,
                p,
                dead_letters=dead_letters,
                batch=batch,
                layout=layout,
                partition=partition,
            )
            for p in projections
        ]
        # Locked in one order by every group: two projector processes never deadlock.
        self.runners.sort(key=lambda r: r.checkpoint)

    def _lowest(self) -> int:
        return min(r.position for r in self.runners)

    async def _prepare(self) -> None:
        for runner in self.runners:
            await runner._prepare()
        self.position = self._lowest()

    def _committed(self) -> dict[str, int]:
        return {r.checkpoint: r.position for r in self.runners}

    def _restart_after(self, lost: CommitsLost) -> None:
        for runner in self.runners:
            if runner.checkpoint == lost.projection:
                runner.position = lost.checkpoint
        self.position = self._lowest()

    async def _commit_resilient(self, batch: Sequence[Delivered], stop: asyncio.Event) -> bool:
        try:
            done = await self._until(stop, lambda: self.commit(batch))
        except asyncpg.PostgresError:
            done = True
            for runner in self.runners:
                if not await runner._commit_resilient(batch, stop):
                    done = False
                    break
        self._moved_to(self._lowest())
        return done

    async def commit(self, batch: Sequence[Delivered]) -> None:
        """Apply the batch to every projection and move their checkpoints, in one
        transaction."""
        for runner in self.runners:
            await runner.letter_undecodable(batch)
        names = [r.checkpoint for r in self.runners]
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute(f"{AS_PROJECTOR}; {schema_path(LIVE_SCHEMA)}")
                rows = await conn.fetch(
                    f"SELECT name, stream_seq FROM {CHECKPOINTS} WHERE name = ANY($1) "
                    "ORDER BY name FOR UPDATE",
                    names,
                )
                checkpoints = {r["name"]: int(r["stream_seq"]) for r in rows}
                moves = await self._apply(conn, checkpoints, batch)
                await move_checkpoints(conn, moves)
            await announce_progress(conn, [(m.name, m.stream_seq) for m in moves])
        for runner, moved in zip(self.runners, moves, strict=True):
            runner._moved_to(moved.stream_seq)

    async def _apply(
        self, conn: asyncpg.Connection, checkpoints: dict[str, int], batch: Sequence[Delivered]
    ) -> list[Moved]:
        """Every projection's fresh events applied; the projections at one checkpoint (all
        of them, but after a rebuild or a poison event) move their positions in one
        statement."""
        at: dict[int, list[ProjectionRunner]] = {}
        for runner in self.runners:
            at.setdefault(checkpoints[runner.checkpoint], []).append(runner)
        moves: dict[str, Moved] = {}
        for checkpoint, runners in at.items():
            for runner in runners:
                runner.check_kept(checkpoint)
            fresh = past(checkpoint, batch)
            gaps: dict[str, list[ProjectionGap]] = {}
            if fresh:
                gaps = await advance_positions(conn, [r.projection for r in runners], fresh)
            for runner in runners:
                name = runner.projection.name
                await apply_events(conn, runner.projection, fresh)
                moves[name] = runner.moved(checkpoint, batch, gaps.get(name, []))
        return [moves[r.projection.name] for r in self.runners]
