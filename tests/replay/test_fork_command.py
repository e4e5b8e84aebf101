"""Fork goes through `registry.fork_thread`: the registry writes it, once, whatever the
number of deliveries; a fork that cannot be made is dead-lettered with the reason."""

from __future__ import annotations

from agency.contracts.codec import encode
from agency.contracts.commands import CommandEnvelope, ForkThread
from agency.contracts.envelope import utc_now
from agency.contracts.ids import new_id
from agency.contracts.subjects import command_subject
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.threads.fork import plan_fork
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents


async def deliver(agents: Agents, command: ForkThread, key: str) -> None:
    """One delivery of the command, past the broker's duplicate window (no message id)."""
    envelope = CommandEnvelope(
        command_id=new_id(), tenant_id=agents.tenant, idempotency_key=key, ts=utc_now(),
        type="registry.fork_thread", payload=command,
    )  # fmt: skip
    subject = command_subject(agents.tenant, "registry", "fork_thread")
    await agents.bus.js.publish(subject, encode(envelope))


async def test_a_fork_command_delivered_twice_writes_one_fork(agents: Agents) -> None:
    key = "fork-cmd-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="done")])
    thread = await agents.thread()
    await agents.invoke(thread, key)
    original = await agents.wait_terminal(thread)
    fork_id = new_id()
    plan = await plan_fork(agents.bus, agents.tenant, thread, len(original), fork_id=fork_id)
    command = ForkThread(
        agency_id=agents.agency, thread_id=thread, at_seq=len(original), fork_thread_id=fork_id
    )

    await deliver(agents, command, "fork-1")
    await deliver(agents, command, "fork-1")

    async def written() -> None:
        assert len(await agents.events(fork_id)) == plan.events_of(fork_id)

    await assert_eventually(written, timeout=15)
    copy = await agents.events(fork_id)
    assert [e.type for e in copy] == [e.type for e in original]
    assert copy[0].payload.request["forkedFrom"] == thread  # type: ignore[attr-defined]
    assert await dead_letters_for(agents.bus, agents.tenant) == []


async def test_a_fork_that_cannot_be_made_is_dead_lettered_with_the_reason(
    agents: Agents,
) -> None:
    thread = await agents.thread()
    command = ForkThread(
        agency_id=agents.agency, thread_id=thread, at_seq=99, fork_thread_id=new_id()
    )
    await agents.bus.commands.send(agents.tenant, command)

    async def rejected() -> None:
        letters = await dead_letters_for(agents.bus, agents.tenant)
        assert [reason for reason, _, _ in letters] == ["fork_refused"]
        assert "atSeq 99 is outside thread" in letters[0][1]

    await assert_eventually(rejected, timeout=15)
    assert await agents.events(command.fork_thread_id) == []
