"""Erasures asked for by scope, on the tenant's aggregate (`tenant.<t>.evt.tenant.<t>`):
every thread of an end user (docs/data.md). The request is recorded first, who asked and
(in the envelope) when; the durable `erasures` consumer deletes the threads, each tree as
`DELETE /threads/{threadId}` does, then records what it deleted. A request stopped
half-way is finished from the log.
"""

from __future__ import annotations

from agency.contracts.events.base import Event
from agency.contracts.events.thread import EndUserId


class EndUserForgetRequested(Event, frozen=True, kw_only=True, tag="end_user.forget_requested"):
    """Every thread created for `end_user_id` (`thread.created`'s `end_user_id`), across the
    tenant's agencies, is to be deleted."""

    end_user_id: EndUserId
    requested_by: str


class EndUserForgotten(Event, frozen=True, kw_only=True, tag="end_user.forgotten"):
    """The request `request_id` (its event's id) is done: the root threads it deleted (with
    their subagent trees), none when the end user had no thread left."""

    end_user_id: EndUserId
    request_id: str
    threads: tuple[str, ...] = ()


ErasureEvent = EndUserForgetRequested | EndUserForgotten
