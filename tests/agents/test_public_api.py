"""The extension API: one package, every name documented."""

from __future__ import annotations

import inspect

import services.agents


def _documented(name: str) -> bool:
    value = getattr(services.agents, name)
    doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
    # A dataclass without a docstring gets its signature as one.
    return bool(doc and doc.strip() and not doc.startswith(f"{value.__name__}("))


def test_every_public_name_is_documented() -> None:
    assert [name for name in services.agents.__all__ if not _documented(name)] == []


def test_the_code_agent_context_is_the_agents_own() -> None:
    assert services.agents.AgentContext.__module__ == "services.agents.code_context"
