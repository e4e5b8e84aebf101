"""Model calls. The model's output is recorded so a replay never calls a model again."""

from __future__ import annotations

from agency.contracts.events.base import ChatMessage, InRun, Usage


class ModelStarted(InRun, frozen=True, kw_only=True, tag="model.started"):
    step: int
    model: str
    message_count: int = 0


class ModelDelta(InRun, frozen=True, kw_only=True, tag="model.delta"):
    """Streamed text, coalesced: one event carries every token of a short time window."""

    step: int
    delta: str


class ModelCompleted(InRun, frozen=True, kw_only=True, tag="model.completed"):
    """`reasoning`: what the model reasoned before its answer, where its provider streams
    it (`reasoning_content`, `reasoning`); kept in the log, never sent back to the model."""

    step: int
    model: str
    message: ChatMessage
    usage: Usage = Usage()
    finish_reason: str = "stop"
    cost_usd: float = 0.0
    reasoning: str = ""


class MiddlewareBeforeModel(InRun, frozen=True, kw_only=True, tag="middleware.before_model"):
    step: int
    middleware_name: str


class MiddlewareAfterModel(InRun, frozen=True, kw_only=True, tag="middleware.after_model"):
    step: int
    middleware_name: str


ModelEvent = (
    ModelStarted | ModelDelta | ModelCompleted | MiddlewareBeforeModel | MiddlewareAfterModel
)
