"""Spreading the partitions' leaders (of the events streams, of the commands streams)
over a cluster's nodes.

NATS places each stream's leader itself, and usually spreads a handful of streams over the
nodes; nothing promises it. A log of several partitions gains nothing from two partitions
led by one node (it takes both their appends), so provisioning looks at the leaders and
asks a stream whose leader already leads another partition to step down in favour of a
node that leads none (the leader step-down API's `placement.preferred`, NATS 2.11+).
"""

from __future__ import annotations

import json

import structlog
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from agency.contracts.partitions import EventLayout

log = structlog.get_logger(__name__)

_TIMEOUT = 10.0


async def leaders(
    js: JetStreamContext, layout: EventLayout, *, commands: bool = False
) -> dict[str, str | None]:
    """Each events stream's leader, or each commands stream's with `commands` (None when
    it has none, or runs on one server)."""
    found: dict[str, str | None] = {}
    for stream in layout.command_streams if commands else layout.streams:
        info = await js.stream_info(stream)
        found[stream] = info.cluster.leader if info.cluster is not None else None
    return found


async def spread_leaders(nc: NATS, js: JetStreamContext, layout: EventLayout) -> int:
    """Move leaders so that no node leads two partitions while a replica node leads none,
    for the events streams and for the commands streams; how many step-downs were asked
    for. Best effort: a refused step-down is logged."""
    if not layout.partitioned:
        return 0
    moved = await _spread(nc, js, layout.streams)
    return moved + await _spread(nc, js, layout.command_streams)


async def _spread(nc: NATS, js: JetStreamContext, partitions: tuple[str, ...]) -> int:
    moved = 0
    led: dict[str, list[str]] = {}
    nodes: set[str] = set()
    for stream in partitions:
        info = await js.stream_info(stream)
        cluster = info.cluster
        if cluster is None or cluster.leader is None:
            return 0  # one server, or a cluster still electing: nothing to spread yet
        led.setdefault(cluster.leader, []).append(stream)
        nodes.add(cluster.leader)
        nodes.update(r.name for r in cluster.replicas or () if r.name)
    idle = sorted(nodes - set(led))
    for leader, streams in sorted(led.items()):
        for stream in streams[1:]:
            if not idle:
                return moved
            preferred = idle.pop(0)
            request = json.dumps({"placement": {"preferred": preferred}}).encode()
            reply = await nc.request(
                f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request, timeout=_TIMEOUT
            )
            answer = json.loads(reply.data)
            if "error" in answer:
                log.warning(
                    "stream leader not moved",
                    stream=stream,
                    leader=leader,
                    preferred=preferred,
                    error=answer["error"],
                )
                continue
            log.info("stream leader moved", stream=stream, leader=leader, to=preferred)
            moved += 1
    return moved
