"""The bodies and answers of the workflow routes (`routes.py`), camelCase on the wire."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec
from litestar.openapi.spec import Schema
from litestar.openapi.spec.enums import OpenAPIType

from agency.contracts.http import Out
from agency.domain.cron import CRON_PATTERN
from agency.services.api.routes_commands import Body
from agency.services.workflows import definition as definitions
from agency.services.workflows.http.body import WorkflowDocument
from agency.services.workflows.http.ops import WORKFLOW_REF

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
NOT_BLANK_NOR_NUL = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
Tag = Annotated[str, msgspec.Meta(max_length=64, pattern=r"^[A-Za-z0-9_-]*$")]
PromptPath = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
PromptText = Annotated[str, msgspec.Meta(max_length=64 * 1024)]


class CreateWorkflowBody(Body, frozen=True, kw_only=True):
    # YAML text (`docs/workflows.md`) or the same as an object; the document gives the
    # object, whose schema says which definitions are valid.
    definition: Annotated[str, msgspec.Meta(min_length=1, max_length=256 * 1024)] | WorkflowDocument
    name: Name | None = None
    tag: Tag = ""
    inputs: dict[str, str] = msgspec.field(default_factory=dict)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    # The content of each `system_prompt_file` the definition names, by the path as written.
    files: Annotated[
        dict[PromptPath, PromptText], msgspec.Meta(max_length=definitions.MAX_MEMBERS)
    ] = msgspec.field(default_factory=dict)

    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "properties": {
            "definition": {
                "$ref": "#/components/schemas/WorkflowDocument",
                "description": "The definition (`WorkflowDocument`); the same as YAML text "
                "is also taken (docs/workflows.md), with `system_prompt_file`s sent in "
                "`files`.",
            }
        },
        # The workflow's name: the body's, or the definition's.
        "anyOf": [
            {"required": ["name"], "properties": {"name": {"type": "string"}}},
            {"properties": {"definition": {"required": ["name"]}}},
        ],
    }


class WorkflowCreatedOut(Out, frozen=True, kw_only=True):
    id: str
    name: str
    tag: str
    members: list[str]
    kickoff: str
    schedules: int
    # `hitl.tools` names of inline members that are none of their tools: they guard nothing.
    warnings: list[str] = msgspec.field(default_factory=list)


class PostBody(Body, frozen=True, kw_only=True):
    # Not blank: something must be said. No NUL either, in the one pattern (two patterns on
    # one string make schema-valid values slow to draw).
    content: Annotated[
        str, msgspec.Meta(min_length=1, max_length=64 * 1024, pattern=NOT_BLANK_NOR_NUL)
    ]
    to: tuple[str, ...] = ()


class PostedOut(Out, frozen=True, kw_only=True):
    message_id: str
    workflow_id: str
    status: Literal["accepted"] = "accepted"


class StopBody(Body, frozen=True, kw_only=True):
    reason: str = ""


class ScheduleBody(Body, frozen=True, kw_only=True):
    """A cron trigger (UTC) of a workflow (`workflow`: id or name:tag) or of an agent of the
    agency (`agent`, run in `@global`)."""

    name: Name
    # Checked by `cron_problem` (a clearer message than the pattern's), stated in the document.
    cron: Annotated[
        str, msgspec.Meta(min_length=1, max_length=200, extra_json_schema={"pattern": CRON_PATTERN})
    ]
    message: Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]
    workflow: Annotated[str, msgspec.Meta(pattern=WORKFLOW_REF)] | None = None
    agent: Name | None = None

    __exactly_one__: ClassVar[dict[str, Schema]] = {
        "workflow": Schema(type=OpenAPIType.STRING),
        "agent": Schema(type=OpenAPIType.STRING),
    }


class ScheduleOut(Out, frozen=True, kw_only=True):
    id: str
    status: Literal["accepted"] = "accepted"
