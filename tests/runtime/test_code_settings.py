"""How a code agent's settings are described (`services/agents/code_settings.py`)."""

from __future__ import annotations

import msgspec

from agency import AgentContext
from agency.contracts.events import BlueprintSpec, ChatMessage
from agency.contracts.events.blueprint import BlueprintConfig
from agency.services.agents.code import CodeAgent
from agency.services.agents.code_settings import describe, type_label, with_overrides
from agency.services.agents.system import AgentSystem
from tests.api.code_agents import TUNER, TUNER_SETTINGS, Tuner


class Loose(CodeAgent):
    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        return None


class Typed(CodeAgent):
    class Settings(msgspec.Struct, kw_only=True):
        limit: int | None = None
        mode: str
        nested: dict[str, int] = {}

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        return None


def test_overrides_that_no_longer_fit_are_a_problem_not_values() -> None:
    spec = AgentSystem().code_agent(TUNER, Tuner, settings=TUNER_SETTINGS).code_agent_for(TUNER)
    assert spec is not None
    saved = BlueprintSpec(
        name=TUNER, config=BlueprintConfig(extra={"settings": {"max_words": "many"}})
    )
    view = describe(spec, saved)
    assert view.settings is None and view.problem is not None
    assert "settings field 'max_words'" in view.problem
    assert view.overrides == {"max_words": "many"}
    assert [f.name for f in view.fields if f.overridden] == ["max_words"]
    assert all(f.value is None for f in view.fields)
    # An empty override removes `settings` from `config.extra`, keeping the rest.
    mixed = BlueprintSpec(name=TUNER, config=BlueprintConfig(extra={"settings": {}, "x": 1}))
    assert with_overrides(mixed, {}).config.extra == {"x": 1}
    assert with_overrides(mixed, {"tone": "dry"}).config.extra == {
        "x": 1,
        "settings": {"tone": "dry"},
    }


def test_required_fields_unions_and_agents_without_a_schema() -> None:
    system = AgentSystem().code_agent("typed", Typed, settings={"mode": "fast"})
    system.code_agent("loose", Loose, settings={"anything": [1]})
    typed, loose = system.code_agent_for("typed"), system.code_agent_for("loose")
    assert typed is not None and loose is not None
    view = describe(typed, None)
    fields = {f.name: f for f in view.fields}
    assert fields["mode"].required and fields["mode"].default is None
    assert fields["mode"].value == "fast"
    assert fields["limit"].type == "integer | null" and fields["limit"].default is None
    assert fields["nested"].type == "object" and fields["nested"].default == {}
    view = describe(loose, None)
    assert view.schema is None and view.fields == []
    assert view.settings == {"anything": [1]}
    assert type_label({"enum": ["a", "b"]}) == "one of a, b"
