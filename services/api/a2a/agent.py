"""The agent an A2A request is for."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agency.services.api.deps import ApiDeps
from agency.services.api.streaming import ThreadFeed


@dataclass(frozen=True, slots=True)
class Agent:
    """The agent a request is for: a blueprint of one of the tenant's agencies."""

    deps: ApiDeps
    tenant: str
    agency_id: str
    blueprint: str
    closing: asyncio.Event

    def feed(self, thread_id: str) -> ThreadFeed:
        return ThreadFeed(self.deps, self.tenant, thread_id, 0, self.closing)
