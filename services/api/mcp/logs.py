"""MCP log notifications (`notifications/message`) about the runs a tool call waits on.

Which levels a request hears depends on its revision. On 2026-07-28 the request itself
asks, with `io.modelcontextprotocol/logLevel` in its `_meta`; without it nothing is sent.
On 2025-11-25, `logging/setLevel` sets the level: the server is stateless (no MCP
session), so the level is kept for the caller's credential, in this API process, until it
is set again. Messages ride the response stream of the request they are about.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, get_args

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agency.services.api.run_outcome import RunOutcome

LOGGER = "agency"
# Least to most severe (RFC 5424), as the protocol orders them.
LEVELS: tuple[types.LoggingLevel, ...] = get_args(types.LoggingLevel)
# Credentials whose level is kept; the least recently set is forgotten first.
_KEPT = 10_000
# The level of the message that tells how a waited-on run stands (`info` while it goes on).
_OUTCOME_LEVEL: dict[str, types.LoggingLevel] = {
    "completed": "info",
    "paused": "notice",
    "canceled": "warning",
    "rejected": "warning",
    "error": "error",
}


def _at_least(level: types.LoggingLevel | None) -> frozenset[types.LoggingLevel]:
    if level not in LEVELS:
        return frozenset()
    return frozenset(LEVELS[LEVELS.index(level) :])


def credential_of(headers: Mapping[str, str]) -> str:
    """A digest of the request's credential: the key the level is kept under."""
    raw = headers.get("authorization", "") + "\n" + headers.get("x-secret", "")
    return hashlib.sha256(raw.encode()).hexdigest()


class LogLevels:
    """The level each credential set with `logging/setLevel` (2025 revisions)."""

    def __init__(self) -> None:
        self._levels: OrderedDict[str, types.LoggingLevel] = OrderedDict()

    def set(self, credential: str, level: types.LoggingLevel) -> None:
        self._levels[credential] = level
        self._levels.move_to_end(credential)
        while len(self._levels) > _KEPT:
            self._levels.popitem(last=False)

    def get(self, credential: str) -> types.LoggingLevel | None:
        return self._levels.get(credential)


class RequestLog:
    """The log of one request: sends what the client asked to hear, drops the rest."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], levels: LogLevels, credential: str):
        self._ctx = ctx
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            meta = (ctx.params or {}).get("_meta")
            asked = meta.get(types.LOG_LEVEL_META_KEY) if isinstance(meta, Mapping) else None
        else:
            asked = levels.get(credential)
        self._allowed = _at_least(asked)

    async def log(self, level: types.LoggingLevel, data: Any) -> None:
        if level not in self._allowed or self._ctx.request_id is None:
            return
        notice = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, data=data, logger=LOGGER)
        )
        await self._ctx.session.send_notification(notice, related_request_id=self._ctx.request_id)

    async def outcome(self, outcome: RunOutcome) -> None:
        """How the run stands when the wait ends, at the level its status calls for."""
        data: dict[str, Any] = {"event": "run.outcome", "runId": outcome.run_id}
        data["status"] = outcome.status
        if outcome.reason or outcome.error:
            data["reason"] = outcome.reason or outcome.error
        if outcome.pending_approval:
            data["pendingApproval"] = [call.name for call in outcome.pending_approval]
        await self.log(_OUTCOME_LEVEL.get(outcome.status, "info"), data)
