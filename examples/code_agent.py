"""A code agent: its logic is `on_message`, the runtime does the rest.

    agency up --app examples.code_agent:system

then create a thread of agent type `notetaker` and invoke it. Each message is streamed
through the model, written down with the `write_file` tool, counted in the agent's state
(`agent.state_set`, rebuilt by a replay of the thread) and answered with a reply streamed
as `reply.*` events; `run.completed` carries the reply.
`agency replay THREAD --re-execute --app examples.code_agent:system` runs `on_message`
again against the recorded model answers and reports `same`.
"""

from __future__ import annotations

import msgspec

from agency import AgentContext, AgentSystem, ChatMessage, CodeAgent


class NoteTaker(CodeAgent):
    """Answers briefly and keeps every answer as a note."""

    description = "Answers briefly and keeps every answer as a note."
    tags = ("default",)  # brings the planning and filesystem tools

    class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
        style: str = "Answer in two sentences."
        model: str = ""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        notes = (ctx.state or {}).get("notes", 0)
        ctx.reply.thinking(f"note {notes + 1}; {len(ctx.conversation)} earlier messages")
        answer = ""
        async for delta in ctx.ai.stream(
            messages=[*ctx.conversation, message], system=ctx.settings.style
        ):
            if ctx.aborted:  # a cancel also cancels this task at its next await
                return
            answer += delta
            ctx.reply.write(delta)
        path = f"notes/{notes + 1}.md"
        ctx.reply.action("write_file", {"path": path})
        await ctx.tools.call("write_file", {"path": path, "content": answer})
        await ctx.set_state({"notes": notes + 1})


system = (
    AgentSystem().defaults().code_agent("notetaker", NoteTaker, settings={"style": "Be brief."})
)
