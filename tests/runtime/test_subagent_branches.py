"""Optional subagent branches: present only while their environment flag is on."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agency.contracts.events import BlueprintSpec, SubagentSpawned, ToolError
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.ids import new_id
from agency.services.agents.builtin.subagents import agent_env, branch_enabled
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import settled
from tests.runtime.conftest import Agents


def task(description: str, kind: str) -> dict[str, object]:
    return {"name": "task", "arguments": {"description": description, "subagentType": kind}}


def task_types(request: dict[str, Any]) -> list[str]:
    """The subagent types the `task` tool offered the model in this request."""
    for tool in request.get("tools") or ():
        if tool["function"]["name"] == "task":
            return list(tool["function"]["parameters"]["properties"]["subagentType"]["enum"])
    return []


async def brancher(agents: Agents, flag: str, env: dict[str, str] | None = None) -> str:
    name = "brancher" + new_id().lower()[-8:]
    await agents.save_blueprint(
        BlueprintSpec(
            name=name,
            prompt="You delegate to your branches.",
            tags=("default",),
            env=env or {},
            config=BlueprintConfig(
                subagents=SubagentsConfig(
                    subagents=("helper", SubagentEntry(name="worker", optional=flag))
                )
            ),
        )
    )
    return await agents.thread(name)


@pytest.mark.parametrize("value", ["", "no"])
async def test_a_branch_whose_flag_is_off_is_neither_offered_nor_spawned(
    agents: Agents, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    flag = "AGENCY_TEST_BRANCH_" + new_id()
    monkeypatch.setenv("AGENCY_TENANT_ENV", flag)  # a saved blueprint reads it only so
    if value:
        monkeypatch.setenv(flag, value)
    key = "off-" + new_id()
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"hidden work {key}", "worker")]),
        ScriptStep(content="could not delegate"),
    ])  # fmt: skip
    parent = await brancher(agents, flag)
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, timeout=30)

    first = next(r for r in agents.llm.requests if key in str(r["messages"]))
    assert task_types(first) == ["helper"]
    assert "worker" not in str([m for m in first["messages"] if m["role"] == "system"])
    assert not any(isinstance(e.payload, SubagentSpawned) for e in events)
    errors = [e.payload.error for e in events if isinstance(e.payload, ToolError)]
    assert len(errors) == 1 and flag in errors[0] and "switched off" in errors[0]


@pytest.mark.parametrize("value", ["1", "YES"])
async def test_a_branch_whose_flag_is_on_is_offered_and_spawned(
    agents: Agents, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    flag = "AGENCY_TEST_BRANCH_" + new_id()
    monkeypatch.setenv("AGENCY_TENANT_ENV", flag)  # a saved blueprint reads it only so
    monkeypatch.setenv(flag, value)
    key = "on-" + new_id()
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"branch work {key}", "worker")]),
        ScriptStep(content="delegated"),
    ])  # fmt: skip
    agents.llm.script(f"branch work {key}", [ScriptStep(content="branch report")])
    parent = await brancher(agents, flag)
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, timeout=30)

    first = next(r for r in agents.llm.requests if key in str(r["messages"]))
    assert task_types(first) == ["helper", "worker"]
    spawned = [e.payload for e in events if isinstance(e.payload, SubagentSpawned)]
    assert [s.subagent_type for s in spawned] == ["worker"]
    assert [e.type for e in settled(events)][-1] == "run.completed"


@pytest.mark.parametrize(
    ("value", "on"),
    [("true", True), ("TRUE", True), ("1", True), ("yes", True), (" Yes ", True),
     ("", False), ("0", False), ("no", False), ("false", False), ("on", False), (None, False)],
)  # fmt: skip
def test_the_flag_values_that_switch_a_branch_on(value: str | None, on: bool) -> None:
    env = {} if value is None else {"FLAG": value}
    assert branch_enabled("FLAG", env) is on
    assert branch_enabled(None, env)  # a branch without a flag is always on


def test_an_optional_flag_must_be_a_variable_name() -> None:
    with pytest.raises(msgspec.ValidationError, match="optional"):
        msgspec.convert({"name": "worker", "optional": "not a name"}, SubagentEntry)


@pytest.mark.parametrize(("process", "offered"), [(None, True), ("no", False)])
async def test_the_blueprints_env_is_the_default_the_runtimes_environment_overrides(
    agents: Agents, monkeypatch: pytest.MonkeyPatch, process: str | None, offered: bool
) -> None:
    flag = "AGENCY_TEST_BRANCH_" + new_id()
    monkeypatch.setenv("AGENCY_TENANT_ENV", flag)  # a saved blueprint reads it only so
    if process is not None:
        monkeypatch.setenv(flag, process)
    key = "default-" + new_id()
    agents.llm.script(key, [ScriptStep(content="looked at my tools")])
    parent = await brancher(agents, flag, env={flag: "yes"})
    await agents.invoke(parent, key)
    await agents.wait_terminal(parent, timeout=30)

    first = next(r for r in agents.llm.requests if key in str(r["messages"]))
    assert task_types(first) == (["helper", "worker"] if offered else ["helper"])


def test_agent_env_reads_the_environment_first_then_the_blueprint() -> None:
    spec = BlueprintSpec(name="a", env={"A": "blueprint", "B": "blueprint"})
    env = agent_env(spec, {"A": "runtime"})
    assert (env.get("A"), env.get("B"), env.get("C", "")) == ("runtime", "blueprint", "")
    assert agent_env(BlueprintSpec(name="b"), {"A": "x"}) == {"A": "x"}
