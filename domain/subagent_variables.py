"""Values provided for a held-back spawn (`subagent.env_required`), and the spawn itself.

`POST /threads/{t}/variables/{r}` sends `subagents.provide_variables` with the values
sealed. The coordinator appends, on the parent, `subagent.variables_provided` (the sealed
values: later spawns of the thread find them) and a `subagent.requested` built from the
call's recorded arguments, marked `deferred` and non-blocking: the call was answered with
the tool error long ago, so the child is spawned whatever became of that run, and its
result reaches the parent as a queued message, like any non-blocking child's. From there
the usual spawn takes over. The decision is pure and made against the parent's log, so a
redelivered command provides nothing twice; the caller hands it the sealing (`infra.sealing`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import msgspec

from agency.contracts.commands import ProvideVariables
from agency.contracts.errors import CommandRejected
from agency.contracts.events import (
    AnyEvent,
    SubagentEnvRequired,
    SubagentRequested,
    SubagentVariablesProvided,
)
from agency.contracts.records import RecordedEvent

Seal = Callable[[Mapping[str, str]], str]
Unseal = Callable[[str], Mapping[str, str]]


def env_request(history: Sequence[RecordedEvent], request_id: str) -> SubagentEnvRequired | None:
    for event in history:
        if (
            isinstance(event.payload, SubagentEnvRequired)
            and event.payload.request_id == request_id
        ):
            return event.payload
    return None


def provided(history: Sequence[RecordedEvent], request_id: str) -> bool:
    return any(
        isinstance(e.payload, SubagentVariablesProvided) and e.payload.request_id == request_id
        for e in history
    )


def provide(
    history: Sequence[RecordedEvent], command: ProvideVariables, *, seal: Seal, unseal: Unseal
) -> tuple[AnyEvent, ...]:
    """Record the values and ask for the deferred child; nothing if they were recorded.
    `seal` and `unseal` open the sealed values and seal the child's scoped ones."""
    request = env_request(history, command.request_id)
    if request is None:
        raise CommandRejected(
            "unknown_request",
            f"thread {command.parent_thread_id} has no variables request {command.request_id}",
        )
    if provided(history, command.request_id):
        return ()
    values = {**unseal(request.sealed_present), **unseal(command.sealed_env)}
    if absent := [n for n in request.missing if not values.get(n)]:
        raise CommandRejected("variables_missing", f"no values for {', '.join(absent)}")
    scoped = {n: values[n] for n in request.required if values.get(n)}
    return (
        SubagentVariablesProvided(
            request_id=command.request_id, names=command.names, sealed_env=command.sealed_env
        ),
        # The call's own arguments, as it recorded them.
        msgspec.structs.replace(
            msgspec.convert(request, SubagentRequested, from_attributes=True),
            blocking=False,
            sealed_env=seal(scoped),
            deferred=True,
        ),
    )
