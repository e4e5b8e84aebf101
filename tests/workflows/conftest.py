"""A running system with the workflows service, over the session's NATS and the fake model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from agency.contracts.commands import CreateWorkflow, PostChannelMessage, WorkflowMemberSpec
from agency.contracts.events import BlueprintSpec, WorkflowLimits
from agency.contracts.ids import new_id
from agency.domain.workflow_members import workflow_id
from agency.domain.workflow_state import WorkflowState, fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_server import FakeLLMServer
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents, llm, running_agents

__all__ = ["Workflows", "llm", "workflows"]

SERVICES = ("registry", "runtime", "tools", "workflows")


@dataclass
class Workflows:
    agents: Agents

    @property
    def bus(self) -> Bus:
        return self.agents.bus

    @property
    def tenant(self) -> str:
        return self.agents.tenant

    async def create(
        self,
        name: str,
        members: dict[str, BlueprintSpec],
        *,
        tag: str = "",
        limits: WorkflowLimits | None = None,
    ) -> str:
        wf = workflow_id(self.tenant, self.agents.agency, name, tag)
        await self.bus.commands.send(
            self.tenant,
            CreateWorkflow(
                agency_id=self.agents.agency,
                workflow_id=wf,
                name=name,
                tag=tag,
                members=tuple(WorkflowMemberSpec(name=n, blueprint=b) for n, b in members.items()),
                limits=limits or WorkflowLimits(),
            ),
        )
        await self.wait(wf, lambda s: set(s.members) == set(members))
        return wf

    async def post(self, wf: str, content: str, *, to: tuple[str, ...] = ()) -> str:
        message_id = "msg_" + new_id()
        await self.bus.commands.send(
            self.tenant,
            PostChannelMessage(
                agency_id=self.agents.agency,
                workflow_id=wf,
                message_id=message_id,
                content=content,
                to=to,
            ),
        )
        return message_id

    async def history(self, wf: str) -> list[RecordedEvent]:
        return await self.bus.store.read(self.tenant, "workflow", wf)

    async def state(self, wf: str) -> WorkflowState:
        return fold(await self.history(wf), wf)

    async def wait(
        self, wf: str, check: Callable[[WorkflowState], bool], timeout: float = 30
    ) -> WorkflowState:
        async def ready() -> WorkflowState:
            state = await self.state(wf)
            assert check(state), [(m.sender, m.content[:40]) for m in state.messages]
            return state

        return await assert_eventually(ready, timeout=timeout)


@pytest.fixture
async def workflows(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> AsyncIterator[Workflows]:
    async with running_agents(bus, nats_url, tenant, llm, services=SERVICES) as agents:
        yield Workflows(agents)
