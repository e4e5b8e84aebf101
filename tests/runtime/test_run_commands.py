"""Cancel and approve bound to their run: a cancel delivered again never ends the next run."""

from __future__ import annotations

from agency.contracts.codec import encode
from agency.contracts.commands import CancelRun, Command, CommandEnvelope
from agency.contracts.envelope import utc_now
from agency.contracts.ids import new_id
from agency.contracts.subjects import COMMANDS_STREAM, command_subject
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents
from tests.runtime.test_loop import assert_gapless, terminals, types


async def redeliver(agents: Agents, command: Command, key: str) -> None:
    """The command as a late redelivery: its key, but past the broker's duplicate window
    (no message id), so only the runtime can tell it was decided already."""
    envelope = CommandEnvelope(
        command_id=new_id(), tenant_id=agents.tenant, idempotency_key=key, ts=utc_now(),
        type=command.__struct_config__.tag, payload=command,  # type: ignore[arg-type]
    )  # fmt: skip
    await agents.bus.js.publish(
        command_subject(agents.tenant, "runtime", "cancel"), encode(envelope)
    )


async def commands_handled(agents: Agents) -> None:
    subject = command_subject(agents.tenant, "runtime", "cancel")
    info = await agents.bus.js.stream_info(COMMANDS_STREAM, subjects_filter=subject)
    assert not (info.state.subjects or {}).get(subject)


async def test_a_replayed_cancel_never_cancels_the_next_queued_run(agents: Agents) -> None:
    key = "rebind-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(content="never seen", delay_ms=3000),
        ScriptStep(content="second run answers", delay_ms=3000),
    ])  # fmt: skip
    thread = await agents.thread()
    run_1 = await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "model.started" in types(es))
    # The cancel that ends run 1 names no run: the runtime records its key on run.canceled.
    unbound = CancelRun(agency_id=agents.agency, thread_id=thread, reason="once")
    await agents.bus.commands.send(agents.tenant, unbound, idempotency_key="cancel-1")
    await agents.wait_terminal(thread)

    run_2 = await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: types(es).count("model.started") == 2)
    await redeliver(agents, unbound, "cancel-1")
    bound = CancelRun(agency_id=agents.agency, thread_id=thread, reason="late", run_id=run_1)
    await redeliver(agents, bound, "cancel-3")
    await assert_eventually(lambda: commands_handled(agents), timeout=10)
    assert terminals(await agents.events(thread)) == ["run.canceled"]  # run 2 still runs

    events = await agents.wait_terminal(thread, count=2)
    assert terminals(events) == ["run.canceled", "run.completed"]
    ends = {e.envelope.run_id: e.type for e in events if e.type.startswith("run.c")}
    assert ends == {run_1: "run.canceled", run_2: "run.completed"}
    assert_gapless(events)
