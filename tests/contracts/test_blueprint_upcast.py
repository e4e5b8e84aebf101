"""Blueprints stored before config was typed (version 1, a free camelCase dict) still read."""

from __future__ import annotations

from typing import Any

import msgspec

from agency.contracts.codec import decode_event, encode
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.events import BlueprintSaved, BlueprintSpec
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    HitlConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.upcasters import stored_blueprint_spec


def stored_v1(config: dict[str, Any]) -> bytes:
    return msgspec.json.encode(
        {
            "event_id": "e1", "tenant_id": "acme", "aggregate": "agency", "aggregate_id": "ag",
            "seq": 2, "ts": "2026-01-01T00:00:00Z", "type": "blueprint.saved", "version": 1,
            "payload": {"type": "blueprint.saved", "revision": 1,
                        "blueprint": {"name": "old", "tags": ["default"], "config": config}},
        }
    )  # fmt: skip


def test_a_version_1_config_is_renamed_to_the_typed_fields() -> None:
    old = stored_v1({
        "maxSteps": 9, "tokenBudget": 4000, "hitl": {"tools": ["send"]},
        "callableAgents": ["other"],
        "subagents": {"subagents": ["w", {"name": "h", "resumable": True, "maxInstances": 2}]},
    })  # fmt: skip

    decoded = decode_event(old)

    assert decoded.version == 2 and isinstance(decoded.payload, BlueprintSaved)
    assert decoded.payload.blueprint.config == BlueprintConfig(
        max_steps=9,
        token_budget=4000,
        hitl=HitlConfig(tools=("send",)),
        callable_agents=("other",),
        subagents=SubagentsConfig(
            subagents=("w", SubagentEntry(name="h", resumable=True, max_instances=2))
        ),
    )


def test_ill_typed_and_unknown_version_1_keys_are_kept_in_extra_and_never_believed() -> None:
    """The `maxSteps: true` of the issue: such an event reads, with the value set aside."""
    old = stored_v1({
        "maxSteps": True, "myMiddleware": {"on": 1},
        "subagents": {"subagents": [{"name": "h", "maxInstances": 0}, {"blocking": True}]},
    })  # fmt: skip

    config = decode_event(old).payload.blueprint.config  # type: ignore[attr-defined]

    assert config.max_steps is None
    assert config.extra == {"maxSteps": True, "myMiddleware": {"on": 1}}
    assert config.subagents == SubagentsConfig(subagents=(SubagentEntry(name="h"),))


def test_a_current_event_reads_in_one_pass_and_round_trips() -> None:
    spec = BlueprintSpec(name="new", config=BlueprintConfig(max_steps=3, extra={"k": [1]}))
    event = Envelope(
        event_id="e1", tenant_id="acme", aggregate="agency", aggregate_id="ag", seq=1,
        ts=utc_now(), type="blueprint.saved", version=2,
        payload=BlueprintSaved(blueprint=spec, revision=1),
    )  # fmt: skip
    assert decode_event(encode(event)) == event


def test_a_read_model_row_in_the_old_shape_still_reads() -> None:
    row = b'{"name":"old","config":{"maxSteps":4,"x":1}}'
    assert stored_blueprint_spec(row).config == BlueprintConfig(max_steps=4, extra={"x": 1})


def test_a_blueprint_stored_before_the_descriptive_fields_reads_with_their_defaults() -> None:
    """Version 1 and version 2 events and read-model rows written before `title`, `icon`,
    `env`, `hooks` and the packaging metadata existed."""
    v2 = msgspec.json.decode(stored_v1({"maxSteps": 3}))
    v2["version"] = 2
    v2["payload"]["blueprint"]["config"] = {"max_steps": 3}
    for raw in (stored_v1({"maxSteps": 3}), msgspec.json.encode(v2)):
        spec = decode_event(raw).payload.blueprint  # type: ignore[attr-defined]
        assert spec.config.max_steps == 3
        assert (spec.title, spec.icon, spec.env, spec.hooks) == ("", "", {}, ())
        assert (spec.package_name, spec.version, spec.author, spec.license) == ("", "", "", "")
    row = stored_blueprint_spec(b'{"name":"old","config":{"maxSteps":4}}')
    assert row.config.max_steps == 4 and row.env == {} and row.hooks == ()
