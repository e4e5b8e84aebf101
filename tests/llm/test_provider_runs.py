"""Whole runs against a provider that streams each shape real OpenAI-compatible servers
send: the model asks for a tool (or several), the tool runs, each result answers its own
call in the next request, and the model's answer completes the run. A stream cut off
before its end is retried, then ends the run with its reason."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import msgspec
import pytest

from agency.contracts.commands import (
    Command,
    CreateAgency,
    CreateTenant,
    CreateThread,
    InvokeThread,
    RemoveTenantProvider,
    SaveBlueprint,
    SetTenantModelPolicy,
    SetTenantProvider,
)
from agency.contracts.events import (
    BlueprintSaved,
    BlueprintSpec,
    ChatMessage,
    ModelCompleted,
    RunCompleted,
    RunError,
    TenantDeletionRequested,
    TenantProviderSet,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.keystore.operator import operator_keys
from agency.infra.keystore.tenant_sealed import PREFIX, SETTINGS_KEY, sealed_with_tenant_key
from agency.infra.keystore.vault import DESTROYED, KeyVault, TenantKeyDestroyed, data_entry
from agency.infra.sealing import UnsealError, seal, unseal
from agency.services.llm.catalog import ProviderCatalog
from agency.services.llm.errors import ModelConfigError
from agency.services.llm.router import ProviderRouter
from agency.services.llm.settings import ModelSettings
from agency.services.llm.tenant_models import StoreTenantModels, seal_own, tenant_models
from agency.services.threads.tenant_erasure import carry_out_tenant
from tests.helpers import ThreadWaits, assert_eventually
from tests.llm.streams import SHAPES, ReplayServer, stream
from tests.runtime.conftest import running_stack

KEY = "sk-test-never-in-events"
# (the stream asking for tools, the stream answering after their results)
RUNS = {
    "openai": ("indexed_tool", "text_usage_only"),
    "openai_parallel": ("indexed_parallel", "text_usage_only"),
    "ollama": ("noindex_single", "noindex_text"),
    "gemini": ("noindex_empty_id_stop", "role_repeated_text"),
    "mistral_parallel": ("noindex_parallel_one_chunk", "text_usage_only"),
    "openrouter_kimi": ("no_finish_reason_tool", "text_usage_only"),
    "openrouter_text_then_tool": ("text_then_tool", "comments_reasoning_text"),
    "anthropic_gateway": ("index_one_after_text", "text_usage_only"),
    "deepseek_groq_reasoning": ("reasoning_content_tool", "reasoning_text"),
    "repeated_ids": ("repeated_ids", "noindex_text"),
    "repeated_index": ("repeated_index", "noindex_text"),
}


def new_tenant() -> str:
    return "t" + new_id().lower()


@dataclass
class Stack(ThreadWaits):
    bus: Bus
    tenant: str
    agency: str
    server: ReplayServer

    async def run(self, text: str, agent: str = "worker") -> tuple[str, list[RecordedEvent]]:
        # The answers set for this run are this run's: a run another module left on the
        # shared broker, taken up by this runtime, does not take them.
        self.server.only = text
        thread = new_id()
        await self.bus.commands.send(
            self.tenant, CreateThread(agency_id=self.agency, thread_id=thread, agent_type=agent)
        )
        run_id = "run_" + new_id()
        await self.bus.commands.send(
            self.tenant,
            InvokeThread(
                agency_id=self.agency,
                thread_id=thread,
                run_id=run_id,
                messages=(ChatMessage(role="user", content=text),),
            ),
        )
        return thread, await self.wait_terminal(thread, timeout=30)

    async def events(self, thread: str) -> list[RecordedEvent]:
        return await self.bus.store.read(self.tenant, "thread", thread)

    async def tenant_of_its_own(self, *commands: Command, tenant: str = "") -> Stack:
        """The same system for a new tenant (created, with an agency; `tenant`, or a new
        id), after `commands` of its registry."""
        tenant, agency = tenant or new_tenant(), new_id()
        send = self.bus.commands.send
        await send(tenant, CreateTenant(name="own", key_id=new_id(), key_hash="0" * 64))

        async def created() -> None:
            assert await self.bus.store.read(tenant, "tenant", tenant)

        await assert_eventually(created)
        for command in commands:
            await send(tenant, command)
        await send(tenant, CreateAgency(agency_id=agency, name="own"))
        expected = 2 + len(commands)

        async def ready() -> None:
            assert len(await self.bus.store.read(tenant, "tenant", tenant)) == expected
            assert await self.bus.store.read(tenant, "agency", agency)

        await assert_eventually(ready)
        return replace(self, tenant=tenant, agency=agency)


@pytest.fixture(scope="module")
async def stack(bus: Bus, nats_url: str) -> AsyncIterator[Stack]:
    tenant = "t" + new_id().lower()
    settings = ModelSettings(timeout=5, backoff_initial=0.01, backoff_max=0.05)
    async with ReplayServer([]) as server:
        catalog = ProviderCatalog.from_env(
            {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY}
        )
        provider = ProviderRouter(catalog, settings=settings)
        services = ("registry", "runtime", "tools")
        try:
            async with running_stack(bus, nats_url, tenant, provider, services=services) as agency:
                yield Stack(bus=bus, tenant=tenant, agency=agency, server=server)
        finally:
            await provider.close()


@pytest.mark.parametrize("name", sorted(RUNS))
async def test_a_run_asks_for_tools_gets_their_results_and_completes(
    stack: Stack, name: str
) -> None:
    asking, answering = RUNS[name]
    stack.server.requests.clear()
    stack.server.answers[:] = [stream(asking), stream(answering)]
    _, events = await stack.run(f"define some words ({name})")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunCompleted), ends
    completed = [e.payload for e in events if isinstance(e.payload, ModelCompleted)]
    assert len(completed) == 2 and len(stack.server.requests) == 2
    asked, answered = SHAPES[asking], SHAPES[answering]
    calls = completed[0].message.tool_calls
    assert [json.loads(c.arguments) for c in calls] == [args for _, _, args in asked.calls]
    assert (completed[0].usage.input_tokens, completed[0].usage.output_tokens) == asked.usage
    assert completed[0].reasoning == asked.reasoning
    assert completed[1].message.content == answered.text
    assert completed[1].reasoning == answered.reasoning
    # The second request: the calls as the model made them, each answered under its id.
    messages = stack.server.requests[1]["messages"]
    assert isinstance(messages, list)
    assistant = next(m for m in messages if m["role"] == "assistant")
    assert [c["id"] for c in assistant["tool_calls"]] == [c.id for c in calls]
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    words = [args["word"] for _, _, args in asked.calls]
    assert results == {c.id: f"definition of {w}" for c, w in zip(calls, words, strict=True)}
    if asked.reasoning:
        assert asked.reasoning not in json.dumps(messages)
    assert stack.server.keys[-1] == f"Bearer {KEY}"
    assert all(KEY.encode() not in msgspec.json.encode(e.payload) for e in events)


async def test_a_stream_cut_off_is_retried_then_ends_the_run_with_its_reason(
    stack: Stack,
) -> None:
    stack.server.requests.clear()
    cut = stream("cut_off")
    stack.server.answers[:] = [None, cut, None, cut]
    _, events = await stack.run("define a word, if the line holds")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunError), ends
    assert ends[-1].kind == "truncated_stream" and "cut off" in ends[-1].error
    assert len(stack.server.requests) == 4


async def test_a_blueprint_of_a_provider_not_configured_ends_its_run_with_the_reason(
    stack: Stack,
) -> None:
    """Saved by a command (the API refuses it on save), the blueprint reaches a run."""
    stack.server.requests.clear()
    blueprint = BlueprintSpec(
        name="elsewhere", prompt="You help.", model="gemini:flash", tags=("default",)
    )
    await stack.bus.commands.send(
        stack.tenant, SaveBlueprint(agency_id=stack.agency, blueprint=blueprint)
    )

    async def saved() -> None:
        events = await stack.bus.store.read(stack.tenant, "agency", stack.agency)
        assert any(isinstance(e.payload, BlueprintSaved) for e in events)

    await assert_eventually(saved)
    _, events = await stack.run("answer from elsewhere", agent="elsewhere")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunError), ends
    assert ends[-1].kind == "config"
    assert "'gemini'" in ends[-1].error and "AGENCY_PROVIDER_GEMINI_API_KEY" in ends[-1].error
    assert stack.server.requests == []
    assert all(KEY.encode() not in msgspec.json.encode(e.payload) for e in events)


async def test_a_tenants_own_key_serves_its_runs_instead_of_the_operators(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tenant's own server is on loopback here: the operator allows it.
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    own_key = "sk-tenant-own-never-in-events"
    tenant = new_tenant()
    async with ReplayServer([], otherwise=stream("text_usage_only")) as own:
        sealed = await seal_own(tenant, "openai", own_key, own.base_url)
        mine = await stack.tenant_of_its_own(
            SetTenantProvider(name="openai", sealed=sealed), tenant=tenant
        )
        stack.server.requests.clear()
        _, events = await mine.run("answer on my own account")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunCompleted), ends
    assert ends[-1].result == "An oxbow is a yoke."
    assert own.keys == [f"Bearer {own_key}"] and len(own.requests) == 1
    assert own.requests[0]["model"] == "gpt-4.1-mini"
    assert stack.server.requests == []  # the operator's provider was not called
    assert all(own_key.encode() not in msgspec.json.encode(e.payload) for e in events)


async def test_a_deleted_tenants_own_key_opens_with_nothing_the_deployment_holds(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tenant's key seals its provider key: once a run used it and the tenant was
    deleted, neither the key store (with the operator key) nor the variables key opens
    the sealed value its log still holds."""
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    own_key = "sk-tenant-own-shredded"
    tenant = new_tenant()
    async with ReplayServer([], otherwise=stream("text_usage_only")) as own:
        sealed = await seal_own(tenant, "openai", own_key, own.base_url)
        mine = await stack.tenant_of_its_own(
            SetTenantProvider(name="openai", sealed=sealed), tenant=tenant
        )
        _, events = await mine.run("answer on my own account, once")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunCompleted), ends
    assert own.keys == [f"Bearer {own_key}"]
    history = await stack.bus.store.read(tenant, "tenant", tenant)
    stored = [e.payload.sealed for e in history if isinstance(e.payload, TenantProviderSet)]
    assert stored == [sealed] and sealed_with_tenant_key(sealed)
    assert own_key.encode() not in msgspec.json.encode([e.payload for e in history])

    position = history[-1].position
    asked = TenantDeletionRequested(requested_by="admin")
    done = await stack.bus.store.append(tenant, "tenant", tenant, [asked], expected=position)
    await carry_out_tenant(stack.bus, done.events[0])

    # This process, which sealed it and ran with it, no longer opens it.
    with pytest.raises(ModelConfigError, match="was deleted"):
        tenant_models(tenant, (e.payload for e in history)).own("openai")
    # Nor does a fresh read of the key store with the operator key: the data key is still
    # there, wrapped by the tenant key, which is destroyed.
    vault = await KeyVault(stack.bus.js, operator_keys()).open()
    wrapped = await vault.kv.get(data_entry(tenant, SETTINGS_KEY))
    assert wrapped.value is not None and wrapped.value != DESTROYED
    with pytest.raises(TenantKeyDestroyed):
        await vault.data_key(tenant, SETTINGS_KEY, create=False)
    # Nor the deployment's variables key.
    with pytest.raises(UnsealError):
        unseal(sealed)
    with pytest.raises(UnsealError):
        unseal(sealed.removeprefix(PREFIX))


async def test_a_tenant_kept_off_the_operators_settings_gets_a_run_error_with_the_reason(
    stack: Stack,
) -> None:
    kept_off = await stack.tenant_of_its_own(SetTenantModelPolicy(operator_fallback=False))
    stack.server.requests.clear()
    _, events = await kept_off.run("answer on the operator's account")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunError), ends
    assert ends[-1].kind == "config" and "not offered" in ends[-1].error
    assert "'openai'" in ends[-1].error
    assert stack.server.requests == []


async def test_a_tenants_settings_are_read_again_from_where_they_were_left(stack: Stack) -> None:
    """Settings an older version sealed with the variables key still open."""
    sealed = seal({"api_key": "sk-own", "base_url": ""})
    mine = await stack.tenant_of_its_own(SetTenantProvider(name="groq", sealed=sealed))
    source = StoreTenantModels(stack.bus.store, refresh=0.0)
    first = await source.models(mine.tenant)
    own = first.own("groq")
    assert own is not None and own.api_key == "sk-own" and first.operator_fallback
    await stack.bus.commands.send(mine.tenant, RemoveTenantProvider(name="groq"))
    await stack.bus.commands.send(mine.tenant, SetTenantModelPolicy(operator_fallback=False))

    async def changed() -> None:
        models = await source.models(mine.tenant)
        assert "groq" not in models.sealed and not models.operator_fallback

    await assert_eventually(changed)


async def test_a_provider_giving_every_step_the_same_call_id_still_gets_each_call_run(
    stack: Stack,
) -> None:
    """OpenRouter's Kimi names its calls "0", "1", … afresh at every step: a later call
    with an earlier step's id gets one of its own, so its result is not taken for the
    earlier one's."""
    stack.server.requests.clear()
    again = stream("no_finish_reason_tool")
    stack.server.answers[:] = [again, again, stream("text_usage_only")]
    _, events = await stack.run("define sickle twice")
    ends = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert isinstance(ends[-1], RunCompleted), ends
    completed = [e.payload for e in events if isinstance(e.payload, ModelCompleted)]
    first, second = (c.message.tool_calls[0].id for c in completed[:2])
    assert first == "0" and second not in {"0", ""}
    messages = stack.server.requests[2]["messages"]
    assert isinstance(messages, list)
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == [first, second]
