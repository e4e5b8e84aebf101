"""A pull consumer's messages as the broker hands them over, one pull request at a time.

nats-py's `fetch` makes a pull request per call: a worker fetching one message at a time
(as it must while messages trickle in: a batch fetch that finds none waiting holds the
first message that comes for the rest of its timeout) sends a request, and a write to the
socket, for every message it takes. A `PullFeed` keeps one request open instead,
for as many messages as the worker has free slots, until the broker has delivered them all
or the request expires; the broker delivers each message as it comes, so nothing waits for
the batch to fill. Messages delivered while the worker has no free slot wait in the
subscription's queue: no request asks for more than the slots free when it is made, so the
worker never holds more than it may.

A request the broker lost (a restart, a new leader) is taken as gone once it is well past
its expiry, and another is made. A status the broker answers with is what nats-py's own
`fetch` makes of it: an expiry, "no messages" and a conflict end the request; any other is
raised as `APIError`, for the worker to subscribe again.

This reads the subscription's queue itself (nats-py 2.16's `_sub._pending_queue`, pinned in
`pyproject.toml`), as its `fetch` does: `next_msg` starts a task per message.
"""

from __future__ import annotations

import asyncio
import json
import time

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError

# A request not answered this long after its expiry is taken as lost.
LOST_AFTER = 1.0
_ENDS_REQUEST = (
    api.StatusCode.REQUEST_TIMEOUT,
    api.StatusCode.NO_MESSAGES,
    api.StatusCode.CONFLICT,
)


class PullFeed:
    """The messages of `sub`, `take`n as they are delivered; a request expires after
    `expires` seconds."""

    def __init__(self, sub: JetStreamContext.PullSubscription, expires: float) -> None:
        self._pull = sub
        self._inbox = sub._sub
        self._expires = expires
        # What the open request may still deliver, and when it is taken as gone.
        self._open = 0
        self._gone_at = 0.0

    @property
    def requested(self) -> int:
        """Messages the open request may still deliver (0: none is open)."""
        return max(self._open, 0) if time.monotonic() < self._gone_at else 0

    async def take(self, most: int, timeout: float) -> list[Msg]:
        """Up to `most` messages: those delivered already, else the first to come within
        `timeout`, with any delivered with it; [] when none came."""
        if most <= 0:
            return []
        taken = self._delivered(most)
        if taken:
            return taken
        deadline = time.monotonic() + timeout
        while True:
            if not self.requested:
                await self._request(most)
            left = min(deadline, self._gone_at) - time.monotonic()
            if left <= 0:
                if time.monotonic() >= deadline:
                    return []
                continue  # the request is taken as lost: make another
            try:
                async with asyncio.timeout(left):
                    msg = await self._inbox._pending_queue.get()
            except TimeoutError:
                continue
            self._consumed(msg)
            if self._processable(msg):
                return [msg, *self._delivered(most - 1)]

    def _delivered(self, most: int) -> list[Msg]:
        """Up to `most` messages waiting in the queue, statuses among them applied."""
        queue = self._inbox._pending_queue
        taken: list[Msg] = []
        while len(taken) < most and not queue.empty():
            msg = queue.get_nowait()
            self._consumed(msg)
            if self._processable(msg):
                taken.append(msg)
        return taken

    def _consumed(self, msg: Msg) -> None:
        self._inbox._pending_size -= len(msg.data)
        self._inbox._pending_queue.task_done()

    def _processable(self, msg: Msg) -> bool:
        """A message to handle; a status ends the request, or is raised."""
        status = msg.headers.get(api.Header.STATUS) if msg.headers else None
        if not status:
            self._open -= 1
            return True
        if status == api.StatusCode.CONTROL_MESSAGE:  # a heartbeat: the request is alive
            return False
        if status in _ENDS_REQUEST:
            self._open = 0
            return False
        raise APIError.from_msg(msg)

    async def _request(self, batch: int) -> None:
        if self._pull._nc.is_closed:
            raise nats.errors.ConnectionClosedError
        body = {"batch": batch, "expires": int(self._expires * 1_000_000_000)}
        await self._pull._nc.publish(
            self._pull._nms, json.dumps(body).encode(), self._pull._deliver
        )
        self._open = batch
        self._gone_at = time.monotonic() + self._expires + LOST_AFTER
