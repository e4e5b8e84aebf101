"""A workflow definition as a JSON object: the typed form of the YAML (`docs/workflows.md`).

`POST /agency/{a}/workflows` takes `definition` as YAML text or as this object, and `/run`
takes its inline `agents` in the same shape. The keys are the YAML's own (snake_case: a
definition is a document of its own format, like a tool's arguments), every value is
typed, and the rules across fields are stated for the OpenAPI document
(`__json_schema_extra__`), so the document says which definitions are valid. What only
the YAML form has: `system_prompt_file` (the files come in the body's `files`) and
`${{ … }}` variables (also in the object, filled from `inputs` and `env`).
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from agency.contracts.events import BlueprintSpec
from agency.contracts.events.blueprint import BlueprintConfig
from agency.domain.cron import CRON_PATTERN
from agency.services.api.blueprint_body import at_boundary
from agency.services.api.text import refuse_nul
from agency.services.workflows import definition as definitions

Token = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
# A member's name: a token, and neither `user` nor `system` (the channel's own senders).
MemberName = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        extra_json_schema={"not": {"enum": ["user", "system"]}},
    ),
]
NotBlank = Annotated[str, msgspec.Meta(pattern=r"\S")]
Limit = Annotated[int, msgspec.Meta(ge=1, le=10_000)]


class Document(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """snake_case as in the YAML, unknown keys refused, absent keys left out, no NUL."""

    def __post_init__(self) -> None:
        refuse_nul(self)


# A member defined inline: each field is the contract's (`BlueprintSpec`, and `max_steps` of
# its `BlueprintConfig`), under the YAML's name, with the rules the contract holds clients to.
MEMBER_FIELDS: dict[str, tuple[type[msgspec.Struct], str]] = {
    "description": (BlueprintSpec, "description"),
    "system_prompt": (BlueprintSpec, "prompt"),
    "model": (BlueprintSpec, "model"),
    "tags": (BlueprintSpec, "tags"),
    "config": (BlueprintSpec, "config"),
    "max_steps": (BlueprintConfig, "max_steps"),
}


def _without_none(tp: Any) -> Any:
    """`tp` without `None`: in a document an absent key (`UNSET`) is what `None` says."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        kept = tuple(a for a in typing.get_args(tp) if a is not type(None))
        return typing.Union[kept]  # noqa: UP007
    return tp


def _inline_member() -> type[Document]:
    """The fields of `MEMBER_FIELDS`, each optional (absent: `UNSET`)."""
    fields: list[tuple[str, Any, Any]] = []
    for name, (source, field) in MEMBER_FIELDS.items():
        contract = {f.name: f.type for f in msgspec.structs.fields(source)}[field]
        tp = _without_none(at_boundary(contract, bodies=False))
        fields.append((name, typing.Union[tp, UnsetType], UNSET))  # noqa: UP007
    member: type[Document] = msgspec.defstruct(  # type: ignore[assignment]
        "InlineMember",
        fields,
        bases=(Document,),
        module=__name__,
        namespace={
            "__doc__": "A member defined here: its blueprint's fields (`max_steps` goes to "
            "its config)."
        },
        kw_only=True,
        frozen=True,
    )
    return member


if TYPE_CHECKING:
    InlineMember: TypeAlias = Document
else:
    InlineMember = _inline_member()


class Member(InlineMember, frozen=True, kw_only=True):
    """A member: defined inline, or `{blueprint: name}` (alone) naming the agency's."""

    blueprint: str | UnsetType = UNSET

    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"required": ["blueprint"], "maxProperties": 1},
            {"properties": {"blueprint": {"not": {}}}},
        ]
    }


class Trigger(Document, frozen=True, kw_only=True):
    """A cron trigger (UTC); its message defaults to the definition's kickoff."""

    cron: Annotated[str, msgspec.Meta(extra_json_schema={"pattern": CRON_PATTERN})]
    message: NotBlank | UnsetType = UNSET


class Limits(Document, frozen=True, kw_only=True):
    max_hops: Limit | UnsetType = UNSET
    max_messages: Limit | UnsetType = UNSET
    max_attempts: Limit | UnsetType = UNSET


Members = Annotated[
    dict[MemberName, str | Member], msgspec.Meta(min_length=1, max_length=definitions.MAX_MEMBERS)
]
InlineMembers = Annotated[
    dict[MemberName, InlineMember],
    msgspec.Meta(min_length=1, max_length=definitions.MAX_MEMBERS),
]


class WorkflowDocument(Document, frozen=True, kw_only=True):
    """A workflow definition: its members (a blueprint's name, `{blueprint: name}`, or
    one defined inline), what it starts with, its triggers and its limits. A trigger
    without a `message` takes the `kickoff`, which must then say something."""

    name: Token | UnsetType = UNSET
    description: str | UnsetType = UNSET
    agents: Members
    kickoff: str | UnsetType = UNSET
    triggers: list[Trigger] | UnsetType = UNSET
    limits: Limits | UnsetType = UNSET

    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"required": ["kickoff"], "properties": {"kickoff": {"pattern": r"\S"}}},
            {"properties": {"triggers": {"items": {"required": ["message"]}}}},
        ]
    }


def as_document(value: WorkflowDocument | dict[str, InlineMember]) -> dict[str, Any]:
    """The object as the YAML would load (what `definitions.build` reads)."""
    if isinstance(value, WorkflowDocument):
        document: dict[str, Any] = msgspec.to_builtins(value)
        return document
    return {"agents": msgspec.to_builtins(value)}
