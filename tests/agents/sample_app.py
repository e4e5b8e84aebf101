"""An app written against the extension API alone (`from services.agents import ...`): a
typed tool, a middleware, a blueprint and a code agent. `test_sample_app.py` type-checks it
with `mypy --strict` and loads it."""

from __future__ import annotations

from typing import Annotated

import msgspec

from agency import (
    AgentContext,
    AgentSystem,
    BlueprintConfig,
    BlueprintSpec,
    ChatMessage,
    CodeAgent,
    HitlConfig,
    Middleware,
    MiddlewareContext,
    ModelPlan,
    StateTool,
    StateToolOutcome,
    ThreadView,
    ToolCall,
    ToolContext,
    ToolFailed,
    ToolSpec,
    tool,
)


@tool
async def convert(
    ctx: ToolContext, amount: Annotated[float, "the amount"], rate: float = 1.0
) -> str:
    """Convert an amount at a rate."""
    if rate <= 0:
        raise ToolFailed("rate must be positive")
    return f"{amount * rate:.2f} (call {ctx.call_id}, attempt {ctx.attempt})"


def count_files(args: dict[str, object], thread: ThreadView, run_id: str) -> StateToolOutcome:
    """Count the thread's files."""
    return StateToolOutcome(output=f"{len(thread.files)} files in {thread.thread_id}")


class Audit(Middleware):
    """Shows how far the thread is in `/state`, reminds the model of its plan and keeps a
    note of each tool call it starts."""

    name = "audit"
    tags = ("audit",)

    def state(self, state: ThreadView) -> dict[str, int]:
        done = sum(1 for todo in state.todos if todo.status == "completed")
        return {"messages": len(state.messages), "done": done}

    def state_tools(self) -> tuple[StateTool, ...]:
        return (StateTool(spec=ToolSpec(name="count_files"), fn=count_files),)

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        open_items = [t.content for t in ctx.state.todos if t.status != "completed"]
        if open_items:
            plan.system_prompts.append("Still to do: " + "; ".join(open_items))
        strict = bool(ctx.config.extra.get("audit_strict", False))
        if strict and ctx.state.parent is not None:
            ctx.set_status(f"step {ctx.step}")

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        if call.name == "convert" and ctx.state.file("rates.md") is None:
            ctx.hold_for_approval([call])


class Greeter(CodeAgent):
    """Greets, then answers with the model, counting the messages it answered."""

    tags = ("default",)

    class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
        greeting: str = "Hello"

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str | None:
        settings: Greeter.Settings = ctx.settings
        ctx.reply.write(settings.greeting + ", ")
        async for delta in ctx.ai.stream(message.content):
            ctx.reply.write(delta)
        seen = ctx.state if isinstance(ctx.state, int) else 0
        await ctx.set_state(seen + 1)
        if "convert" in ctx.tools.names:
            ctx.reply.action("convert", {"amount": 1})
        return None


ADVISER = BlueprintSpec(
    name="adviser",
    prompt="You convert currencies and keep a plan.",
    tags=("default", "audit", "money"),
    config=BlueprintConfig(
        max_steps=5, hitl=HitlConfig(tools=("convert",)), extra={"audit_strict": True}
    ),
)

system = (
    AgentSystem()
    .defaults()
    .add_tool(convert, ["money"])
    .use(Audit(), ["audit"])
    .add_agent(ADVISER)
    .code_agent("greeter", Greeter, settings={"greeting": "Hi"})
)


async def convert_twice(ctx: ToolContext) -> str:
    """The tool keeps its function's signature: this call is type-checked."""
    return await convert.function(ctx, 2.0, rate=1.5)
