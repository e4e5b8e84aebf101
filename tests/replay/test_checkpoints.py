"""`checkpoint.saved`: written where a run stops, checked against the log by replay."""

from __future__ import annotations

from pathlib import Path

from agency.contracts.events import CheckpointSaved, RunError
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.eventview import event_view
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.checkpoint import STOPS, checkpoint_of, verify
from tests.replay.apps import with_broken_hook
from tests.replay.conftest import call, cli
from tests.runtime.conftest import Agents, running_agents


def checkpoints(events: list[RecordedEvent]) -> list[tuple[RecordedEvent, RecordedEvent]]:
    """Each checkpoint with the event before it."""
    return [
        (events[i - 1], e) for i, e in enumerate(events) if isinstance(e.payload, CheckpointSaved)
    ]


def assert_checkpoint_follows_each_stop(events: list[RecordedEvent]) -> None:
    stops = [e for e in events if isinstance(e.payload, STOPS)]
    found = checkpoints(events)
    assert [before.type for before, _ in found] == [e.type for e in stops]
    for before, saved in found:
        payload = saved.payload
        assert isinstance(payload, CheckpointSaved)
        # In the stop's own append, and a fingerprint of the log folded up to it.
        assert payload.upto_seq == before.seq == saved.seq - 1
        assert payload.run_id == before.envelope.run_id is not None
        assert saved.stream_seq == before.stream_seq + 1
        upto = [e for e in events if e.seq <= payload.upto_seq]
        expected = checkpoint_of(fold(saved.envelope.tenant_id, saved.envelope.aggregate_id, upto))
        assert (payload.state_hash, payload.size) == (expected.state_hash, expected.size)
        assert payload.state_hash.startswith("sha256:") and payload.size > 0
    assert verify(events) == {saved.seq: True for _, saved in found}


async def test_pauses_and_ends_are_checkpointed_and_replay_verifies_them(
    agents: Agents, data_dir: Path
) -> None:
    key = "checkpoint-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(call("lookup_guarded", word="x"),)),
        ScriptStep(content="approved and done"),
    ])  # fmt: skip
    thread = await agents.thread()
    await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "run.paused" in [e.type for e in es])
    await agents.approve(thread, approved=False)
    events = await agents.wait_terminal(thread)
    assert_checkpoint_follows_each_stop(events)
    assert [b.type for b, _ in checkpoints(events)] == ["run.paused", "run.completed"]

    ran = await cli("replay", thread, "--data-dir", str(data_dir))
    assert ran.status == 0, ran.err
    shown = [line for line in ran.lines if " checkpoint.saved " in line]
    assert len(shown) == 2
    assert all("sha256:" in line and line.endswith("✓ the log folds to it") for line in shown)

    # The event view over HTTP names its fields in camelCase.
    _, saved = checkpoints(events)[0]
    view = event_view(saved.envelope, saved.stream_seq)
    assert view.type == "checkpoint.saved"
    assert set(view.data) == {"stateHash", "size", "uptoSeq", "runId"}
    assert view.run_id == events[-2].envelope.run_id

    # A log that folds to another state than the checkpoint says is reported.
    first_message = next(e.seq for e in events if e.type == "message.appended")
    tampered = [e for e in events if e.seq != first_message]
    assert False in verify(tampered).values()


async def test_a_canceled_run_is_checkpointed_too(agents: Agents) -> None:
    key = "checkpoint-cancel-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="slow", delay_ms=20_000)])
    thread = await agents.thread()
    await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "model.started" in [e.type for e in es])
    await agents.cancel(thread)
    events = await agents.wait_terminal(thread)
    assert_checkpoint_follows_each_stop(events)
    assert [b.type for b, _ in checkpoints(events)] == ["run.canceled"]


async def test_a_run_ended_by_a_raising_hook_is_checkpointed(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    async with running_agents(bus, nats_url, tenant, llm, system=with_broken_hook()) as agents:
        thread = await agents.thread()
        await agents.invoke(thread, "broken-" + tenant)
        events = await agents.wait_terminal(thread)
    (error,) = [e.payload for e in events if isinstance(e.payload, RunError)]
    assert error.kind == "internal_error"
    assert_checkpoint_follows_each_stop(events)
    assert [b.type for b, _ in checkpoints(events)] == ["run.error"]
