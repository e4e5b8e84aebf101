"""`@ag-ui/client`'s HttpAgent through a proxy, as clients meet one. AG-UI has no
reconnect: a run whose stream is cut mid-answer goes on to its end on the server, the
thread takes the next run, and that run's `MESSAGES_SNAPSHOT` carries the whole answer
the cut stream lost the rest of. A message the thread took from a stream cut before its
answer began is not taken again when the client sends it with its next one; the same
words sent alone are a new message."""

from __future__ import annotations

import dataclasses
import uuid

from agency.services.llm.fake_scripts import ScriptStep
from tests.cutting_proxy import Proxy
from tests.helpers import assert_eventually
from tests.protocols.agui.conftest import Tenant, text_of, types

WORDS = " ".join(f"word{i}" for i in range(40))
TERMINAL = ("run.completed", "run.error", "run.canceled")


async def test_a_cut_run_ends_on_the_server_and_the_next_run_shows_its_whole_answer(
    tenant: Tenant,
) -> None:
    key = f"agui-cut-{tenant.agency}"
    tenant.llm.script(
        key, [ScriptStep(content=WORDS, stream_delay_ms=40), ScriptStep(content="and then")]
    )
    thread = str(uuid.uuid4())
    async with Proxy(tenant.url, cut_after=8, cuts=1) as proxy:
        proxied = dataclasses.replace(tenant, url=proxy.url)
        cut = await proxied.client("worker", [{"user": f"{key}: one"}], thread=thread)
        assert proxy.cut == 1
    (turn,) = cut["turns"]
    assert turn["error"] is not None and turn["outcome"] is None, turn
    kinds = types(turn["events"])
    assert "RUN_FINISHED" not in kinds and "TEXT_MESSAGE_START" in kinds, kinds
    partial = text_of(turn["events"])
    assert partial and WORDS.startswith(partial) and partial != WORDS, partial

    # The run goes on without its stream, to its end.
    async def ended() -> None:
        events = await tenant.bus.store.read(tenant.id, "thread", thread)
        assert [e.type for e in events if e.type in TERMINAL] == ["run.completed"]

    await assert_eventually(ended, timeout=30)

    # The application sends the next message with what it kept (the cut answer).
    kept = cut["messages"]
    assert [m["role"] for m in kept] == ["user", "assistant"]
    assert kept[1]["content"] == partial
    got = await tenant.client("worker", [{"user": f"{key}: two"}], thread=thread, messages=kept)
    (turn,) = got["turns"]
    assert turn["error"] is None and turn["outcome"]["outcome"] == "success", turn
    assert text_of(turn["events"]) == "and then"
    (snapshot,) = [e for e in turn["events"] if e["type"] == "MESSAGES_SNAPSHOT"]
    shown = [(m["role"], m.get("content")) for m in snapshot["messages"]]
    assert shown == [
        ("user", f"{key}: one"),
        ("assistant", WORDS),
        ("user", f"{key}: two"),
        ("assistant", "and then"),
    ]
    assert snapshot["messages"][1]["id"] == kept[1]["id"]
    assert [(m["role"], m["content"]) for m in got["messages"]] == shown
    # The model saw the first message once: the kept copy was not sent to it again.
    last = next(r for r in reversed(tenant.llm.requests) if f"{key}: two" in str(r))
    users = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert users == [f"{key}: one", f"{key}: two"]


async def test_a_run_cut_before_its_answer_began_is_not_asked_again(tenant: Tenant) -> None:
    """The application kept only the user's message; sent again with the next one, the
    thread takes the next one only."""
    key = f"agui-early-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="first answer"), ScriptStep(content="and then")])
    thread = str(uuid.uuid4())
    async with Proxy(tenant.url, cut_after=1, cuts=1) as proxy:
        proxied = dataclasses.replace(tenant, url=proxy.url)
        cut = await proxied.client("worker", [{"user": f"{key}: one"}], thread=thread)
        assert proxy.cut == 1
    assert types(cut["turns"][0]["events"]) == ["RUN_STARTED"]
    kept = cut["messages"]
    assert [m["role"] for m in kept] == ["user"]

    async def ended() -> None:
        events = await tenant.bus.store.read(tenant.id, "thread", thread)
        assert [e.type for e in events if e.type in TERMINAL] == ["run.completed"]

    await assert_eventually(ended, timeout=30)
    got = await tenant.client("worker", [{"user": f"{key}: two"}], thread=thread, messages=kept)
    (turn,) = got["turns"]
    assert turn["error"] is None and turn["outcome"]["outcome"] == "success", turn
    (snapshot,) = [e for e in turn["events"] if e["type"] == "MESSAGES_SNAPSHOT"]
    assert [(m["role"], m.get("content")) for m in snapshot["messages"]] == [
        ("user", f"{key}: one"),
        ("assistant", "first answer"),
        ("user", f"{key}: two"),
        ("assistant", "and then"),
    ]
    assert snapshot["messages"][0]["id"] == kept[0]["id"]
    last = next(r for r in reversed(tenant.llm.requests) if f"{key}: two" in str(r))
    users = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert users == [f"{key}: one", f"{key}: two"]


async def test_a_client_sending_only_its_latest_message_is_taken_at_its_word(
    tenant: Tenant,
) -> None:
    """The same words as the thread's last input, sent alone, are a new message."""
    key = f"agui-again-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="first answer"), ScriptStep(content="and then")])
    thread = str(uuid.uuid4())
    await tenant.client("worker", [{"user": f"{key}: yes"}], thread=thread)
    got = await tenant.client("worker", [{"user": f"{key}: yes"}], thread=thread)
    (turn,) = got["turns"]
    assert turn["error"] is None and text_of(turn["events"]) == "and then", turn
    last = next(r for r in reversed(tenant.llm.requests) if key in str(r))
    users = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert users == [f"{key}: yes", f"{key}: yes"]
