"""A model step's two ends: what opens it (the prompt, the middleware's plan, the trimmed
context, the events stored before the call, the request) and what its answer closes it
with (the answer's events, the middleware's view of it, a pause for approval). The call
between them, and the appends, are the loop's (`ThreadDriver._model_step`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import msgspec

from agency.contracts.events import (
    AgentStarted,
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    ContextTrimmed,
    HitlInterrupt,
    MessageAppended,
    MiddlewareAfterModel,
    MiddlewareBeforeModel,
    ModelCompleted,
    ModelStarted,
    RunPaused,
    RunTick,
    SideConfig,
    ToolCall,
    ToolRegistered,
)
from agency.contracts.ids import derived_id
from agency.domain.thread_state import ThreadState
from agency.services.agents.middleware import (
    Middleware,
    MiddlewareContext,
    ModelPlan,
    hooks_model_calls,
)
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import EMPTY_PARAMETERS, Tool, ToolSpec
from agency.services.llm.provider import ModelRequest, ModelResponse
from agency.services.runtime.budget import trim_to_budget
from agency.services.runtime.failures import fit_message, fit_text, hook
from agency.services.runtime.session import side_messages
from agency.services.runtime.toolset import side_config, tools_now
from agency.services.runtime.view import StepContext

DEFAULT_TOKEN_BUDGET = 100_000


@dataclass(frozen=True, slots=True)
class Resolved:
    blueprint: BlueprintSpec
    middleware: list[Middleware]
    # Every blueprint the thread's agency knows (static, overridden by dynamic ones).
    blueprints: dict[str, BlueprintSpec]
    # The tools of the MCP servers the blueprint names, by the name the model calls.
    mcp_tools: dict[str, Tool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Opened:
    """A step ready to call: the events stored with the call, and the call."""

    prelude: list[AnyEvent]
    request: ModelRequest
    model: str
    # The side of a session whose turn it is (`services/runtime/session.py`), if any.
    side: SideConfig | None


async def opening(
    system: AgentSystem,
    resolved: Resolved,
    ctx: MiddlewareContext,
    state: ThreadState,
    run_id: str,
    step: int,
) -> Opened:
    """The step's request from `state` (the thread with every decision so far applied),
    after the middleware's `before_model` hooks, and the events that open it."""
    blueprint = resolved.blueprint
    model = system.model_for(blueprint)
    tools = tools_now(system, blueprint, state, resolved.blueprints, resolved.mcp_tools)
    side = side_config(blueprint, state.side)
    own_prompt = side.prompt if side is not None else blueprint.prompt
    prompts = [own_prompt] if own_prompt else []
    for middleware in resolved.middleware:
        with hook(middleware, "system_prompt"):
            extra = middleware.system_prompt(ctx)
        if extra:
            prompts.append(extra)
    budget = blueprint.config.token_budget or DEFAULT_TOKEN_BUDGET
    plan = ModelPlan(
        model=model,
        system_prompts=prompts,
        messages=side_messages(state, state.side) if side and state.side else list(state.messages),
        tools=[t.spec for t in tools.values()],
        token_budget=budget,
    )
    prelude: list[AnyEvent] = [RunTick(run_id=run_id, step=step)]
    if step == 1:
        prelude.append(AgentStarted(run_id=run_id, agent_type=state.agent_type, model=model))
    for middleware in resolved.middleware:
        if not hooks_model_calls(middleware)[0]:
            continue
        with hook(middleware, "before_model"):
            await middleware.before_model(ctx, plan)
        prelude.append(
            MiddlewareBeforeModel(run_id=run_id, step=step, middleware_name=middleware.name)
        )
    # Tools registered by these hooks are offered to this very call, and the tools the
    # run's client runs itself (a tool of the thread's keeps its name).
    offered = {spec.name for spec in plan.tools}
    plan.tools.extend(
        ToolSpec(name=e.name, description=e.description, parameters=e.parameters)
        for e in ctx.emitted
        if isinstance(e, ToolRegistered) and e.name not in offered
    )
    run = state.run(run_id)
    offered = {spec.name for spec in plan.tools}
    plan.tools.extend(
        ToolSpec(
            name=t.name,
            description=t.description,
            parameters=t.parameters or dict(EMPTY_PARAMETERS),
        )
        for t in (run.client_tools if run is not None else ())
        if t.name not in offered
    )
    system_messages = [ChatMessage(role="system", content="\n\n".join(plan.system_prompts))]
    system_messages = system_messages if plan.system_prompts else []
    trimmed = trim_to_budget(
        system_messages, plan.messages, plan.token_budget or DEFAULT_TOKEN_BUDGET
    )
    if trimmed.dropped:
        prelude.append(
            ContextTrimmed(
                run_id=run_id,
                step=step,
                dropped_messages=trimmed.dropped,
                tokens_before=trimmed.tokens_before,
                tokens_after=trimmed.tokens_after,
                budget=plan.token_budget or DEFAULT_TOKEN_BUDGET,
            )
        )
    prelude.append(
        ModelStarted(run_id=run_id, step=step, model=model, message_count=len(trimmed.messages))
    )
    prelude.extend(ctx.emitted)
    ctx.emitted.clear()
    request = ModelRequest(
        model=model,
        messages=(*system_messages, *trimmed.messages),
        tools=tuple(plan.tools),
        tenant=state.tenant_id,
        agency=state.agency_id,
    )
    return Opened(prelude=prelude, request=request, model=model, side=side)


def unique_call_ids(
    message: ChatMessage, state: ThreadState, run_id: str, step: int
) -> ChatMessage:
    """The answer's tool calls, each with an id no earlier call of the thread has: some
    providers number calls afresh at every step (OpenRouter's Kimi: "0", "1", …), and a
    result is matched to its call by id. A repeated id is replaced by one derived from the
    run, the step and the call's place, so a re-execution makes the same."""
    if not message.tool_calls:
        return message
    earlier = {c.id for m in state.messages if m.role == "assistant" for c in m.tool_calls}
    if not any(c.id in earlier for c in message.tool_calls):
        return message
    calls = tuple(
        msgspec.structs.replace(c, id=derived_id("call_", run_id, str(step), str(i)))
        if c.id in earlier
        else c
        for i, c in enumerate(message.tool_calls)
    )
    return msgspec.structs.replace(message, tool_calls=calls)


async def closing(
    resolved: Resolved,
    ctx: StepContext,
    opened: Opened,
    response: ModelResponse,
    run_id: str,
    step: int,
) -> list[AnyEvent]:
    """The events the answer adds, after the middleware's `on_model_result` hooks; the
    step pauses for approval when a hook held tool calls back. `ctx.thread` is the thread
    as stored once the step opened."""
    response = replace(
        response, message=unique_call_ids(fit_message(response.message), ctx.thread, run_id, step)
    )
    if opened.side is not None:
        # Whose turn it was: each side later sees its own words as the assistant's.
        response = replace(
            response, message=msgspec.structs.replace(response.message, name=ctx.thread.side)
        )
    after: list[AnyEvent] = [
        ModelCompleted(
            run_id=run_id,
            step=step,
            model=response.model or opened.model,
            message=response.message,
            usage=response.usage,
            finish_reason=response.finish_reason,
            cost_usd=response.cost_usd,
            reasoning=fit_text(response.reasoning),
        )
    ]
    for middleware in resolved.middleware:
        if not hooks_model_calls(middleware)[1]:
            continue
        with hook(middleware, "on_model_result"):
            await middleware.on_model_result(ctx, response.message)
        after.append(
            MiddlewareAfterModel(run_id=run_id, step=step, middleware_name=middleware.name)
        )
    after.append(MessageAppended(run_id=run_id, message=response.message))
    after.extend(ctx.emitted)
    held = held_calls(ctx.thread, run_id, response.message, ctx.held_calls)
    if held:
        after.append(HitlInterrupt(run_id=run_id, proposed_tool_calls=held))
        after.append(RunPaused(run_id=run_id, reason="hitl"))
    return after


def held_calls(
    thread: ThreadState, run_id: str, message: ChatMessage, by_middleware: Sequence[ToolCall]
) -> tuple[ToolCall, ...]:
    """The answer's calls that wait for approval: those the middleware held back (the
    blueprint's `hitl.tools`), or all of them when the run's invoke asked for a pause
    before every tool call (`pause_before_tools`, on its `request.accepted`)."""
    run = thread.run(run_id)
    if run is not None and run.pause_before_tools and message.tool_calls:
        return message.tool_calls
    return tuple(by_middleware)
