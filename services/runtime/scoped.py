"""Scoped variables of a subagent spawn (`immediate.scopedEnv` of its entry).

A child of an entry naming `scopedEnv` needs each of those variables in its scope. Each
value comes from the variables the blueprint may read (`agent_env`: its `env`, holding the
runtime's environment for the operator's blueprints and only the variables exposed by
`AGENCY_TENANT_ENV` for a tenant's, read at the decision like `optional` flags: set them
alike on every runtime worker) or, failing that, from the values provided for this thread
through `POST /threads/{t}/variables/{r}`. The values travel to the child
sealed (`infra/sealing.py`) in `subagent.requested` and its `thread.created`,
out of every model's sight: they are neither arguments of the call nor part of any
message. A variable unset or empty in both places is missing: the call is answered with a
structured tool error (`subagent_env_required`, with a request id and the missing names)
and `subagent.env_required` records the call's arguments, so that values posted for that
request spawn the child as the call asked (`domain/subagent_variables.py`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass

from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    SubagentEnvRequired,
    ToolCall,
    ToolError,
)
from agency.contracts.ids import derived_id
from agency.domain.thread_state import RunView, ThreadState
from agency.infra.sealing import seal, unseal_all
from agency.services.agents.builtin.subagents import CREATE_TOOL

ENV_REQUIRED = "subagent_env_required"


@dataclass(frozen=True, slots=True)
class EnvRequest:
    """A spawn held back for missing variables: what the child needs, and the call's own
    arguments, to spawn it with once they are provided."""

    subagent_type: str
    required: tuple[str, ...]
    missing: tuple[str, ...]
    description: str
    name: str | None
    attachments: tuple[str, ...]
    blueprint: BlueprintSpec | None = None


def variables_request_id(tenant_id: str, thread_id: str, tool_call_id: str) -> str:
    return derived_id("var_", tenant_id, thread_id, tool_call_id)


def env_required(
    state: ThreadState,
    run: RunView,
    call: ToolCall,
    request: EnvRequest,
    present: dict[str, str],
    timeout_ms: int | None,
) -> tuple[AnyEvent, ...]:
    """The call's structured tool error (`subagent_env_required`, naming the request and
    the missing variables, never a value) and the request recorded on the thread."""
    request_id = variables_request_id(state.tenant_id, state.thread_id, call.id)
    problem = {
        "error": ENV_REQUIRED,
        "requestId": request_id,
        "subagentType": request.subagent_type,
        "required": list(request.required),
        "missing": list(request.missing),
        "message": f"{request.subagent_type} needs the variables "
        f"{', '.join(request.missing)}, which are not set. A person provides them at "
        f"POST /threads/{state.thread_id}/variables/{request_id}; the subagent then starts "
        "with this call's arguments and its result arrives here as a message.",
    }
    return (
        SubagentEnvRequired(
            run_id=run.run_id,
            tool_call_id=call.id,
            request_id=request_id,
            resumable=call.name == CREATE_TOOL,
            timeout_ms=timeout_ms,
            sealed_present=seal(present),
            # The request as held back: each of its fields is the event's of that name.
            **{f.name: getattr(request, f.name) for f in dataclasses.fields(request)},
        ),
        ToolError(
            run_id=run.run_id,
            tool_call_id=call.id,
            tool_name=call.name,
            error=json.dumps(problem),
        ),
    )


def scoped_values(
    state: ThreadState, names: tuple[str, ...], env: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The values found for `names` in `env` (`agent_env`) or the thread's provided
    values, and the names found nowhere, in order."""
    provided: dict[str, str] | None = None  # opened only when the environment lacks one
    values: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        value = env.get(name, "")
        if not value:
            provided = unseal_all(state.provided_sealed) if provided is None else provided
            value = provided.get(name, "")
        if value:
            values[name] = value
        else:
            missing.append(name)
    return values, tuple(missing)
