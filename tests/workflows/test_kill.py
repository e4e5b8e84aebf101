"""The workflows controller SIGKILLed mid-workflow and restarted: no message lost or
posted twice, no member run started twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from agency.contracts.events import BlueprintSpec, MemberInvoked
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.runtime.apps import build as build_app
from tests.runtime.conftest import running_agents
from tests.runtime.test_kill import ServiceProcess, data_dir, process_cleanup
from tests.workflows.conftest import Workflows

__all__ = ["data_dir", "process_cleanup"]


async def test_controller_killed_mid_workflow_loses_and_doubles_nothing(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    t = tenant
    llm.script(f"writer-{t}", [ScriptStep(content="Draft done. @reviewer please review.")])
    llm.script(
        f"reviewer-{t}",
        [ScriptStep(content="Reviewed. @approver please approve.", delay_ms=2500)],
    )
    llm.script(f"approver-{t}", [ScriptStep(content="Approved.")])
    controller = ServiceProcess("workflows", data_dir, "--ack-wait", "2")
    process_cleanup.append(controller)
    await controller.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "runtime", "tools"), system=build_app()
    ) as agents:
        workflows = Workflows(agents)
        wf = await workflows.create(
            "review",
            {
                n: BlueprintSpec(name=n, prompt=f"Your script is {n}-{t}.")
                for n in ("writer", "reviewer", "approver")
            },
        )
        await workflows.post(wf, "@writer write it")
        # The reviewer's run was just decided (its invoke may or may not have been sent):
        # kill the controller there; the run ends (if it started) while a new one boots.
        await workflows.wait(wf, lambda s: "reviewer" in s.active)
        await controller.kill()
        await controller.start()
        state = await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 4, 60)
        await asyncio.sleep(1.0)  # anything a duplicate would add arrives by now
        state = await workflows.state(wf)
        history = await workflows.history(wf)
        threads = {n: await agents.events(m.thread_id) for n, m in state.members.items()}

    assert [m.sender for m in state.messages] == ["user", "writer", "reviewer", "approver"]
    assert len({m.message_id for m in state.messages}) == 4
    invoked = Counter(e.payload.member for e in history if isinstance(e.payload, MemberInvoked))
    assert invoked == {"writer": 1, "reviewer": 1, "approver": 1}
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    for events in threads.values():
        assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
        assert [e.type for e in events].count("request.accepted") == 1
