"""Erasures asked for by scope, recorded on the tenant's aggregate
(`tenant.<t>.evt.tenant.<t>`): every thread of an end user, an agency with every thread of
it, a whole tenant (docs/data.md). The request is recorded first, who asked and (in the
envelope) when; the threads are then deleted, each tree as `DELETE /threads/{threadId}`
does, and the request recorded done. A request stopped half-way is finished from the log.
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


class AgencyDeletionRequested(Event, frozen=True, kw_only=True, tag="agency.deletion_requested"):
    """The agency `agency_id` is to be deleted, every thread of it first."""

    agency_id: str
    requested_by: str


class AgencyDeleted(Event, frozen=True, kw_only=True, tag="agency.deleted"):
    """On the agency's own aggregate, its last event: the agency is gone, its root threads
    `threads` deleted (with their subagent trees) at the request `request_id`."""

    request_id: str
    requested_by: str
    threads: tuple[str, ...] = ()


class TenantDeletionRequested(Event, frozen=True, kw_only=True, tag="tenant.deletion_requested"):
    """The tenant is to be deleted: every agency of it first (each as
    `agency.deletion_requested` deletes it), then its API keys revoked and its key
    destroyed."""

    requested_by: str


class TenantDeleted(Event, frozen=True, kw_only=True, tag="tenant.deleted"):
    """The tenant's last event: it is gone, its `agencies` deleted, its live `api_keys`
    revoked (just before it), its key destroyed, at the request `request_id`."""

    request_id: str
    requested_by: str
    agencies: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()


ErasureEvent = (
    EndUserForgetRequested
    | EndUserForgotten
    | AgencyDeletionRequested
    | AgencyDeleted
    | TenantDeletionRequested
    | TenantDeleted
)
