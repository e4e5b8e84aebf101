"""A blueprint's `hooks`: ids of middleware that run for the agent besides those its tags
select; an id naming no middleware of the system is kept and ignored."""

from __future__ import annotations

from agency.contracts.events import BlueprintSpec
from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep
from tests.runtime.conftest import Agents, make_system


def offered(request: dict[str, object]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}  # type: ignore[attr-defined,index,union-attr]


async def test_a_hook_id_brings_its_middleware_to_an_agent_whose_tags_do_not(
    agents: Agents,
) -> None:
    plain, hooked = ("plain" + new_id().lower()[-8:], "hooked" + new_id().lower()[-8:])
    await agents.save_blueprint(BlueprintSpec(name=plain, prompt="You plan nothing."))
    await agents.save_blueprint(
        BlueprintSpec(name=hooked, prompt="You plan.", hooks=("planning", "audit.log"))
    )
    seen: dict[str, set[str]] = {}
    for name in (plain, hooked):
        key = f"hooks-{name}"
        agents.llm.script(key, [ScriptStep(content="done")])
        thread = await agents.thread(name)
        await agents.invoke(thread, key)
        await agents.wait_terminal(thread, timeout=30)
        seen[name] = offered(next(r for r in agents.llm.requests if key in str(r["messages"])))
    assert "write_todos" not in seen[plain]
    assert "write_todos" in seen[hooked]


def test_middleware_for_adds_the_named_middleware_once_in_their_order() -> None:
    system = make_system()
    spec = BlueprintSpec(name="x", tags=("planning",), hooks=("planning", "filesystem", "nope"))
    names = [m.name for m in system.middleware_for(spec)]
    assert names.count("planning") == 1 and "filesystem" in names and "nope" not in names
