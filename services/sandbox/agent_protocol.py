"""What the runtime and an isolated code agent's worker exchange: JSON lines both ways.

The runtime writes `AgentStart` first, then answers the worker's requests; the worker
writes requests, then one end (`Finished`, `Raised` or `OutOfMemory`). A request with an
`id` is answered by `Answered` or `Refused` of that id (`Delta`s of it before, for a model
call made with `stream`); `Write`, `Thinking` and `Action` are not answered. Values are
plain JSON data (messages as `ChatMessage`'s fields). msgspec JSON never writes a newline
inside a value, so one line is one message. Imported inside the sandbox: msgspec only.
"""

from __future__ import annotations

from typing import Any

import msgspec


class AgentStart(msgspec.Struct, frozen=True, kw_only=True, tag="start"):
    """One run of `on_message`, with the limits the worker sets on itself first."""

    module: str
    qualname: str
    agent_type: str
    thread_id: str
    run_id: str
    message: dict[str, Any]
    conversation: list[dict[str, Any]] = []
    settings: Any = None
    state: Any = None
    tools: list[dict[str, Any]] = []
    env: dict[str, str] = {}
    cpu_seconds: int
    memory_bytes: int


class Delta(msgspec.Struct, frozen=True, kw_only=True, tag="delta"):
    """Text of the answer of model call `id` as it arrives."""

    id: int
    text: str


class Answered(msgspec.Struct, frozen=True, kw_only=True, tag="answered"):
    """Request `id` done: a model call's message, a tool's output, `None` for a state."""

    id: int
    value: Any = None


class Refused(msgspec.Struct, frozen=True, kw_only=True, tag="refused"):
    """Request `id` failed: `kind` "tool" (a `ToolCallError`) or "model" (a `ModelError`
    of `model_kind`)."""

    id: int
    kind: str
    error: str
    retryable: bool = False
    model_kind: str = "model_error"


ToWorker = AgentStart | Delta | Answered | Refused


class Complete(msgspec.Struct, frozen=True, kw_only=True, tag="complete"):
    """`ctx.ai.complete`; `stream` asks for `Delta`s first."""

    id: int
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    system: str | None = None
    model: str | None = None
    tools: bool | list[str] = False
    stream: bool = False


class CallTool(msgspec.Struct, frozen=True, kw_only=True, tag="call_tool"):
    id: int
    name: str
    args: dict[str, Any] = {}


class SetState(msgspec.Struct, frozen=True, kw_only=True, tag="set_state"):
    id: int
    value: Any = None


class Write(msgspec.Struct, frozen=True, kw_only=True, tag="write"):
    text: str


class Thinking(msgspec.Struct, frozen=True, kw_only=True, tag="thinking"):
    text: str


class Action(msgspec.Struct, frozen=True, kw_only=True, tag="action"):
    name: str
    args: dict[str, Any] = {}


class Started(msgspec.Struct, frozen=True, kw_only=True, tag="started"):
    """The worker is loaded and confined: the handler's wall time starts now."""


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="finished"):
    """`on_message` returned `result`."""

    result: str | None = None


class Raised(msgspec.Struct, frozen=True, kw_only=True, tag="raised"):
    """`on_message` (or importing the agent) raised: `ExcType: message`; `model_kind` set
    when it was a model error the agent let through."""

    error: str
    model_kind: str | None = None
    message: str = ""


class OutOfMemory(msgspec.Struct, frozen=True, kw_only=True, tag="out_of_memory"):
    """An allocation failed at the worker's memory limit."""


FromWorker = (
    Started
    | Complete
    | CallTool
    | SetState
    | Write
    | Thinking
    | Action
    | Finished
    | Raised
    | OutOfMemory
)

encoder = msgspec.json.Encoder()
to_worker = msgspec.json.Decoder(ToWorker)
from_worker = msgspec.json.Decoder(FromWorker)


def line(message: ToWorker | FromWorker) -> bytes:
    return encoder.encode(message) + b"\n"
