"""The HTTP shape of a blueprint: the contract's structs, derived here with camelCase names.

`contracts/events/blueprint.py` declares a blueprint once, with the rules of each field; a
rule a stored event need not meet is a `Checked` annotation there, applied here and not when
events are read. Each body below is made from its contract struct by `camel_body`: the same
fields and defaults, camelCase on the wire, lists for tuples, the `Checked` rules in place,
the fields `Checked(operator=True)` left out, unknown fields refused (a misspelt `maxStep`
is a 400 naming it; settings of user middleware go in `config.extra`). A field added to
the contract is a field of the body. Conversion to the contract reads attributes
(`from_attributes`). The answers (`BlueprintOut`, `BlueprintListItem`) are every contract
field, camelCase and present, then what the answer adds.
"""

from __future__ import annotations

import re
import types
import typing
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, ForwardRef, Literal, TypeAlias

import msgspec
from litestar.exceptions import PermissionDeniedException

from agency.contracts.events import BlueprintSpec, blueprint as contract, blueprint_fields
from agency.contracts.events.blueprint_fields import Checked
from agency.contracts.events.tool_servers import McpServer, RemoteAgent
from agency.projections.agency_queries import BlueprintSource
from agency.services.api.text import refuse_nul
from agency.services.egress import server_refusals

# Each contract struct of a blueprint and the name of its body.
BODY_NAMES: dict[type[msgspec.Struct], str] = {
    contract.HitlConfig: "HitlBody",
    contract.ImmediateConfig: "ImmediateBody",
    contract.SubagentEntry: "SubagentEntryBody",
    contract.SubagentsConfig: "SubagentsBody",
    McpServer: "McpServerBody",
    RemoteAgent: "RemoteAgentBody",
    contract.BlueprintConfig: "ConfigBody",
    contract.SessionToolBinding: "BindingBody",
    contract.SideConfig: "SideBody",
    contract.TreeLimits: "TreeLimitsBody",
    contract.BlueprintSpec: "SaveBlueprintBody",
}


class Camel(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    rename="camel",
):
    """camelCase on the wire, unknown fields refused, defaults left out of answers, no NUL;
    then the contract's own rules (`__post_init__`) when the body has all its fields, and
    the checks of `_BOUNDARY_CHECKS`."""

    __contract__: ClassVar[type[msgspec.Struct] | None] = None
    __contract_rules__: ClassVar[typing.Callable[[Any], None] | None] = None

    def __post_init__(self) -> None:
        refuse_nul(self)
        source = type(self).__contract__
        if source is None:
            return
        rules = type(self).__contract_rules__
        if rules is not None:
            try:
                rules(self)
            except ValueError as e:
                raise ValueError(_camel_words(str(e), source)) from None
        check = _BOUNDARY_CHECKS.get(source)
        if check is not None:
            check(self)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _camel_words(message: str, source: type[msgspec.Struct]) -> str:
    """A contract's message with its field names as the body spells them."""
    for field in msgspec.structs.fields(source):
        message = re.sub(rf"\b{field.name}\b", camel(field.name), message)
    return message


def at_boundary(tp: Any, rules: bool = True, bodies: bool = True) -> Any:
    """The type of a contract field in a body: `Checked` rules in place of the field's own
    `msgspec.Meta` (no rules at all in an answer, `rules=False`), tuples as lists, contract
    structs as their bodies (by name; kept as they are with `bodies=False`, for a document
    in snake_case such as a workflow definition)."""
    if bodies and isinstance(tp, type) and tp in BODY_NAMES:
        return ForwardRef(BODY_NAMES[tp])
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        inner, *extras = args
        checked = [e for e in extras if isinstance(e, Checked)]
        metas = [e for e in extras if isinstance(e, msgspec.Meta)] if rules else []
        if rules and checked and checked[0].meta is not None:
            metas = [checked[0].meta]
        inner = at_boundary(inner, rules, bodies)
        return Annotated[(inner, *metas)] if metas else inner
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(at_boundary(a, rules, bodies) for a in args)]  # noqa: UP007
    if origin is tuple:
        return list[at_boundary(args[0], rules, bodies)]  # type: ignore[misc]
    if origin is dict:
        return dict[at_boundary(args[0], rules, bodies), at_boundary(args[1], rules, bodies)]  # type: ignore[misc]
    return tp


def _checked(tp: Any) -> Checked:
    if typing.get_origin(tp) is Annotated:
        for extra in typing.get_args(tp)[1:]:
            if isinstance(extra, Checked):
                return extra
    return Checked()


def camel_body(source: type[msgspec.Struct], name: str | None = None) -> type[Camel]:
    """The HTTP body of a contract struct, named as in `BODY_NAMES` unless told (see the
    module's docstring)."""
    fields: list[tuple[str, Any, Any]] = []
    for field in name_first(msgspec.structs.fields(source)):
        checked = _checked(field.type)
        if checked.operator:
            continue
        tp = at_boundary(field.type)
        if field.required or checked.required:
            fields.append((field.name, tp))  # type: ignore[arg-type]
        elif field.default_factory is not msgspec.NODEFAULT:
            factory = field.default_factory
            if isinstance(factory, type) and factory in BODY_NAMES:
                factory = _lazy(BODY_NAMES[factory])
            fields.append((field.name, tp, msgspec.field(default_factory=factory)))
        else:
            default = [] if field.default == () else field.default
            fields.append((field.name, tp, default))
    # The contract's own rules read the body's attributes: all its fields must be there.
    whole = len(fields) == len(msgspec.structs.fields(source))
    namespace: dict[str, Any] = {
        "__contract__": source,
        "__contract_rules__": getattr(source, "__post_init__", None) if whole else None,
        "__doc__": source.__doc__,
    }
    extra = getattr(source, "__json_schema_extra__", None)
    if extra is not None:
        namespace["__json_schema_extra__"] = _camel_properties(extra)
    body: type[Camel] = msgspec.defstruct(  # type: ignore[assignment]
        name or BODY_NAMES[source],
        fields,
        bases=(Camel,),
        module=__name__,
        namespace=namespace,
        kw_only=True,
    )
    return body


def name_first(fields: tuple[msgspec.structs.FieldInfo, ...]) -> list[msgspec.structs.FieldInfo]:
    """The fields with `name` first, where a reader looks for it (a contract struct's shared
    fields come before its own)."""
    return sorted(fields, key=lambda field: field.name != "name")


def _lazy(name: str) -> Any:
    return lambda: globals()[name]()


def _camel_properties(schema: Any) -> Any:
    """A JSON Schema fragment with the names under `properties` and `required` in camelCase."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "properties":
                out[key] = {camel(k): _camel_properties(v) for k, v in value.items()}
            elif key == "required":
                out[key] = [camel(k) for k in value]
            else:
                out[key] = _camel_properties(value)
        return out
    if isinstance(schema, list):
        return [_camel_properties(v) for v in schema]
    return schema


def _refuse_egress(body: Any) -> None:
    """An address no connection for a tenant may reach (`services/egress.py`): a 403, as
    `egress_door` answers, the body being well formed; a name is resolved and checked
    again on connecting. Checked where a blueprint comes in only: a stored blueprint still
    reads back (its runs are refused on connecting)."""
    for i, url, problem in server_refusals(body.config.mcp_servers if body.config else ()):
        _refused(body, f"config.mcpServers[{i}].url", url, problem)
    for i, url, problem in server_refusals(body.config.remote_agents if body.config else ()):
        _refused(body, f"config.remoteAgents[{i}].url", url, problem)


def _refused(body: Any, field: str, url: str, problem: str) -> typing.NoReturn:
    where = f"blueprint {body.name!r}: " if getattr(body, "name", "") else ""
    raise PermissionDeniedException(f"{where}field '{field}': {url!r} is refused: {problem}")


_BOUNDARY_CHECKS: dict[type[msgspec.Struct], typing.Callable[[Any], None]] = {
    contract.BlueprintSpec: _refuse_egress,
    contract.SubagentEntry: _refuse_egress,  # an inline blueprint, as a saved one
}

if TYPE_CHECKING:  # made at import; the checker sees what they all are
    HitlBody: TypeAlias = Camel
    ImmediateBody: TypeAlias = Camel
    SubagentEntryBody: TypeAlias = Camel
    SubagentsBody: TypeAlias = Camel
    McpServerBody: TypeAlias = Camel
    RemoteAgentBody: TypeAlias = Camel
    ConfigBody: TypeAlias = Camel
    BindingBody: TypeAlias = Camel
    SideBody: TypeAlias = Camel
    TreeLimitsBody: TypeAlias = Camel
    _SaveBlueprintFields: TypeAlias = Camel
else:
    HitlBody = camel_body(contract.HitlConfig)
    ImmediateBody = camel_body(contract.ImmediateConfig)
    SubagentEntryBody = camel_body(contract.SubagentEntry)
    SubagentsBody = camel_body(contract.SubagentsConfig)
    McpServerBody = camel_body(McpServer)
    RemoteAgentBody = camel_body(RemoteAgent)
    ConfigBody = camel_body(contract.BlueprintConfig)
    BindingBody = camel_body(contract.SessionToolBinding)
    SideBody = camel_body(contract.SideConfig)
    TreeLimitsBody = camel_body(contract.TreeLimits)
    _SaveBlueprintFields = camel_body(contract.BlueprintSpec, "SaveBlueprintFields")
HookId = at_boundary(blueprint_fields.HookId)


class SaveBlueprintBody(_SaveBlueprintFields, frozen=True, kw_only=True):
    """`BlueprintSpec` as saved over HTTP."""

    def spec(self) -> BlueprintSpec:
        return msgspec.convert(self, BlueprintSpec, from_attributes=True)


def _answer_fields() -> list[Any]:
    """Every field of `BlueprintSpec` as answered: present (required), without rules."""
    return [
        (f.name, at_boundary(f.type, rules=False))
        for f in name_first(msgspec.structs.fields(BlueprintSpec))
    ]


def _answer() -> type[msgspec.Struct]:
    """`BlueprintSpec` as answered: every field, camelCase and present, then the revision
    and, on save, each `hitl.tools` name that is none of the blueprint's tools (it guards
    nothing), listing the tools it has."""
    fields = _answer_fields()
    fields += [
        ("revision", int | None),
        ("warnings", list[str], msgspec.field(default_factory=list)),
    ]
    return msgspec.defstruct(
        "BlueprintOut", fields, module=__name__, frozen=True, kw_only=True, rename="camel"
    )


def _list_item() -> type[msgspec.Struct]:
    """`BlueprintSpec` as listed: every field, camelCase and present, then where it comes
    from, its kind, and its revision and time when saved through the API."""
    fields = _answer_fields()
    fields += [
        ("source", BlueprintSource),
        ("kind", Literal["prompt", "code"], "prompt"),
        ("revision", int | None, None),
        ("updated_at", datetime | None, None),
    ]
    return msgspec.defstruct(
        "BlueprintListItem",
        fields,
        module=__name__,
        frozen=True,
        kw_only=True,
        rename="camel",
        namespace={"__doc__": _LIST_ITEM_DOC},
    )


_LIST_ITEM_DOC = """A blueprint in the agency's list: static or dynamic (saved through the API).
`sideA` and `sideB` are a dual-AI blueprint's sides, null for an ai_human one;
`exposeAsTool` says whether agents listing it in `callableAgents` may call it (a
subagent session of a dual-AI blueprint, a handoff to an ai_human one). `kind` is
`code` for a code agent (its settings: `…/blueprints/{name}/settings`), else `prompt`."""

if TYPE_CHECKING:
    BlueprintOut: TypeAlias = msgspec.Struct
    BlueprintListItem: TypeAlias = msgspec.Struct
else:
    BlueprintOut = _answer()
    BlueprintListItem = _list_item()


def blueprint_out(
    spec: BlueprintSpec, revision: int | None, warnings: list[str] | None = None
) -> BlueprintOut:
    fields = {name: getattr(spec, name) for name in spec.__struct_fields__}
    answer = types.SimpleNamespace(**fields, revision=revision, warnings=warnings or [])
    return msgspec.convert(answer, BlueprintOut, from_attributes=True)
