"""A blueprint is declared once, by its contract: the HTTP body is the same fields, camelCase,
with the same rules, and a rule meant for clients does not hold stored events."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

import msgspec
import pytest

from agency.contracts.codec import decode_event, encode
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.events import BlueprintSaved, BlueprintSpec
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    HitlConfig,
    ImmediateConfig,
    SessionToolBinding,
    SideConfig,
    SubagentEntry,
    SubagentsConfig,
    TreeLimits,
)
from agency.contracts.events.blueprint_fields import (
    Checked,
)
from agency.contracts.events.tool_servers import (
    McpServer,
    RemoteAgent,
)
from agency.projections import agency_queries
from agency.services.api import blueprint_body
from agency.services.api.blueprint_body import (
    BODY_NAMES,
    BlueprintListItem,
    SaveBlueprintBody,
    camel,
)
from agency.services.workflows.http.body import MEMBER_FIELDS, InlineMember, WorkflowDocument


def _checked(tp: Any) -> Checked:
    if typing.get_origin(tp) is typing.Annotated:
        for extra in typing.get_args(tp)[1:]:
            if isinstance(extra, Checked):
                return extra
    return Checked()


def _default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return field.default


RULES = ("min_length", "max_length", "pattern", "ge", "gt", "le", "lt")


def _rules(tp: Any, at_boundary: bool = True) -> dict[str, Any]:
    """The rules of a type, by where they apply (`items.`, `keys.`, `values.`); at the
    boundary a `Checked` rule takes the place of the type's own."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        metas = [a for a in args[1:] if isinstance(a, msgspec.Meta)]
        checked = [a for a in args[1:] if isinstance(a, Checked) and a.meta is not None]
        if at_boundary and checked:
            metas = [checked[0].meta]
        own = {k: getattr(m, k) for m in metas for k in RULES if getattr(m, k) is not None}
        return own | _rules(args[0], at_boundary)
    if origin in (typing.Union, types.UnionType):
        found: dict[str, Any] = {}
        for arg in args:
            found |= _rules(arg, at_boundary)
        return found
    if origin in (list, tuple):
        return {f"items.{k}": v for k, v in _rules(args[0], at_boundary).items()}
    if origin is dict:
        keys = {f"keys.{k}": v for k, v in _rules(args[0], at_boundary).items()}
        return keys | {f"values.{k}": v for k, v in _rules(args[1], at_boundary).items()}
    return {}


@pytest.mark.parametrize("source", list(BODY_NAMES), ids=lambda c: c.__name__)
def test_every_contract_field_is_a_camel_case_body_field_with_the_same_rules(
    source: type[msgspec.Struct],
) -> None:
    """Each contract field but the operator's is the body's, under its camelCase name, with
    the same default and requiredness, and the rules the contract states for clients (its
    `Checked` rule, else its own)."""
    body = getattr(blueprint_body, BODY_NAMES[source])
    contract_fields = {f.name: f for f in msgspec.structs.fields(source)}
    body_fields = {f.name: f for f in msgspec.structs.fields(body)}
    hints = typing.get_type_hints(source, include_extras=True)
    expected = {n for n in contract_fields if not _checked(hints[n]).operator}
    assert set(body_fields) == expected
    body_hints = typing.get_type_hints(body, include_extras=True)
    for name in expected:
        assert body_fields[name].encode_name == camel(name)
        checked = _checked(hints[name])
        assert body_fields[name].required == (contract_fields[name].required or checked.required)
        if not body_fields[name].required:
            assert msgspec.json.encode(_default(body_fields[name])) == msgspec.json.encode(
                _default(contract_fields[name])
            ), name
        assert _rules(body_hints[name], at_boundary=False) == _rules(hints[name]), name


def test_no_contract_struct_of_a_blueprint_is_without_a_body() -> None:
    """Every struct a blueprint is made of has its body: a struct added to the contract
    needs its line in `BODY_NAMES`, or its field would reach HTTP in snake_case."""
    seen: set[type] = set()
    pending: list[Any] = [BlueprintSpec]
    while pending:
        tp = pending.pop()
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            if tp in seen:
                continue
            seen.add(tp)
            pending.extend(typing.get_type_hints(tp).values())
        else:
            pending.extend(typing.get_args(tp))
    assert seen == set(BODY_NAMES) == {
        BlueprintSpec, BlueprintConfig, HitlConfig, SubagentsConfig, SubagentEntry,
        ImmediateConfig, McpServer, RemoteAgent, SideConfig, SessionToolBinding, TreeLimits,
    }  # fmt: skip


def _camel_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {camel(k): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_camel_keys(v) for v in value]
    return value


def _every_side_field() -> SideConfig:
    """A dual-AI side with every field set."""
    return SideConfig(
        prompt="p", label="A", stop_on_response=False, stop_tool="done",
        stop_tool_response_property="r", max_steps=3, session_stop="stop",
        session_fail=SessionToolBinding(name="fail", message_property="why",
                                        attachments_property="files"),
        session_status="status",
    )  # fmt: skip


def test_a_blueprint_with_every_field_set_is_the_same_through_its_http_body() -> None:
    side = _every_side_field()
    entry = SubagentEntry(
        name="child", blocking=False, resumable=True, max_instances=2, optional="WITH_CHILD",
        init_user_message_property="m", init_attachments_property="a",
        immediate=ImmediateConfig(name_env="N", description_env="D", scoped_env=("S",)),
        parent_communication="explicit", description="d", prompt="p", model="m", tags=("t",),
        config=BlueprintConfig(max_steps=2), title="T", icon="i", env={"K": "v"}, hooks=("h",),
        package_name="pkg", version="1.0.0", author="me", license="MIT",
    )  # fmt: skip
    spec = BlueprintSpec(
        name="whole", description="d", prompt="p", model="m", tags=("a", "b"),
        config=BlueprintConfig(
            max_steps=5, token_budget=1000, hitl=HitlConfig(tools=("send",)),
            subagents=SubagentsConfig(subagents=("plain", entry)), callable_agents=("x",),
            mcp_servers=(McpServer(name="m", url="https://mcp.example/", headers={"A": "b"},
                                   tools=("t",), timeout=5.0),),
            remote_agents=(RemoteAgent(name="r", url="https://agent.example/card.json",
                                       description="d", headers={"A": "b"}, timeout=9.0),),
            extra={"mine": {"k": 1}},
        ),
        type="dual_ai", side_a=side, side_b=side, max_session_turns=4, expose_as_tool=True,
        tool_description="td", title="T", icon="i", env={"K": "v"}, hooks=("h",),
        package_name="@s/pkg", version="1.2.3-rc.1", author="me", license="MIT",
        init_user_message_property="msg", init_attachments_property="att",
    )  # fmt: skip
    wire = _camel_keys(msgspec.to_builtins(spec))
    wire["config"]["extra"] = {"mine": {"k": 1}}  # its keys are the user's own
    body = msgspec.json.decode(msgspec.json.encode(wire), type=SaveBlueprintBody)
    assert body.spec() == spec


def _whole_spec() -> BlueprintSpec:
    side = _every_side_field()
    return BlueprintSpec(
        name="whole", description="d", prompt="p", model="m", tags=("a", "b"),
        config=BlueprintConfig(max_steps=5, mcp_servers=(McpServer(name="m", url="https://mcp.example/"),)),
        type="dual_ai", side_a=side, side_b=side, max_session_turns=4, expose_as_tool=True,
        tool_description="td", title="T", icon="i", env={"K": "v"}, hooks=("h",),
        package_name="@s/pkg", version="1.2.3-rc.1", author="me", license="MIT",
        init_user_message_property="msg", init_attachments_property="att",
    )  # fmt: skip


def test_a_listed_blueprint_is_every_contract_field_in_camel_case_then_its_origin() -> None:
    """`BlueprintListItem` is derived from the contract: each field of `BlueprintSpec`,
    camelCase and always present, then `source`, `kind`, `revision` and `updatedAt`."""
    fields = {f.name: f for f in msgspec.structs.fields(BlueprintListItem)}
    contract = [f.name for f in msgspec.structs.fields(BlueprintSpec)]
    assert set(fields) == {*contract, "source", "kind", "revision", "updated_at"}
    for name in contract:
        assert fields[name].encode_name == camel(name) and fields[name].required, name
    assert fields["updated_at"].encode_name == "updatedAt"


def test_a_listed_blueprint_answers_every_field_of_a_saved_one() -> None:
    """A blueprint with every field set is listed with each of them, camelCase, as it was
    saved: the read model's view carries every field the contract has."""
    spec = _whole_spec()
    stored = agency_queries.StoredBlueprint(spec=spec, revision=3, updated_at=utc_now())
    (view,) = agency_queries.merge_blueprints({}, [stored])
    item = msgspec.convert(view, BlueprintListItem, from_attributes=True)
    answer = msgspec.to_builtins(item)
    expected = _camel_keys(msgspec.to_builtins(spec))
    assert {k: answer[k] for k in expected} == expected
    assert (answer["source"], answer["kind"], answer["revision"]) == ("dynamic", "prompt", 3)


def test_a_workflow_member_defined_inline_has_its_contract_fields_and_rules() -> None:
    """Each field of an inline member is its contract field (`MEMBER_FIELDS`: the blueprint's,
    `max_steps` its config's), optional, with the rules the contract holds clients to."""
    fields = {f.name: f for f in msgspec.structs.fields(InlineMember)}
    assert set(fields) == set(MEMBER_FIELDS)
    hints = typing.get_type_hints(InlineMember, include_extras=True)
    for name, (source, field) in MEMBER_FIELDS.items():
        contract = typing.get_type_hints(source, include_extras=True)[field]
        assert not fields[name].required and fields[name].default is msgspec.UNSET, name
        assert _rules(hints[name], at_boundary=False) == _rules(contract), name


@pytest.mark.parametrize(
    ("member", "refusal"),
    [
        ({"model": "m" * 201}, "length <= 200"),
        ({"max_steps": 0}, ">= 1"),
        ({"max_steps": None}, "got `null`"),
        ({"config": {"max_steps": 0}}, ">= 1"),
    ],
    ids=["model", "max_steps", "max_steps-null", "config.max_steps"],
)
def test_a_workflow_member_defined_inline_is_refused_as_its_blueprint_would_be(
    member: dict[str, Any], refusal: str
) -> None:
    """A member's field breaking the blueprint contract's rule is refused by the body."""
    document = {"agents": {"writer": member}, "kickoff": "go"}
    with pytest.raises(msgspec.ValidationError, match=re.escape(refusal)):
        msgspec.json.decode(msgspec.json.encode(document), type=WorkflowDocument)


# Each rule a client is held to and blueprints stored before it may break: (the contract's
# field, its value in a stored blueprint, where the HTTP body refuses it).
CLIENT_RULES = [
    ("name", "has space", "name"),
    ("model", "m" * 201, "model"),
    ("title", "x" * 300, "title"),
    ("icon", "i" * 2001, "icon"),
    ("author", "a" * 201, "author"),
    ("max_session_turns", 0, "maxSessionTurns"),
    ("env", {"not-a-name": "v"}, "env"),
    ("env", {"V": "v" * 10_001}, "env[...]"),
    ("hooks", ("no spaces allowed",), "hooks[0]"),
    ("package_name", "Upper", "packageName"),
    ("version", "one", "version"),
]


@pytest.mark.parametrize(("field", "value", "at"), CLIENT_RULES, ids=[r[2] for r in CLIENT_RULES])
def test_a_client_rule_refuses_a_body_but_not_a_stored_event(
    field: str, value: Any, at: str
) -> None:
    """`Checked` rules hold at HTTP; a stored blueprint that breaks one still reads."""
    spec = BlueprintSpec(**{"name": "ok", field: value})
    stored = Envelope(
        event_id="e1", tenant_id="acme", aggregate="agency", aggregate_id="a1", seq=1,
        ts=utc_now(), type="blueprint.saved", version=BlueprintSaved.schema_version,
        payload=BlueprintSaved(blueprint=spec, revision=1),
    )  # fmt: skip
    payload = decode_event(encode(stored)).payload
    assert isinstance(payload, BlueprintSaved) and payload.blueprint == spec
    wire = _camel_keys(msgspec.to_builtins(spec))
    if field == "env":
        wire["env"] = value  # its names are the user's own
    with pytest.raises(msgspec.ValidationError, match=re.escape(f"`$.{at}`")):
        msgspec.json.decode(msgspec.json.encode(wire), type=SaveBlueprintBody)
