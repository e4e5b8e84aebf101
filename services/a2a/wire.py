"""A2A v1.0 on the wire: the JSON form of the protocol's messages (`a2a.proto`'s JSON
mapping: camelCase fields, enums by their names, a `oneof` as the one field set).

Only what Agency sends and reads is here. Requests are decoded leniently (unknown fields
ignored, as proto JSON readers do); answers omit what is unset.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import msgspec
import msgspec.inspect

PROTOCOL_VERSION = "1.0"

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
]
TERMINAL_STATES: frozenset[str] = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
# A stream ends at a terminal state or where the task waits for the client.
FINAL_STATES: frozenset[str] = TERMINAL_STATES | {
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
}
Role = Literal["ROLE_UNSPECIFIED", "ROLE_USER", "ROLE_AGENT"]


class Wire(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """A message of the protocol: camelCase, unset fields left out."""


class Part(Wire, kw_only=True):
    text: str | None = None
    raw: str | None = None  # base64
    url: str | None = None
    data: Any = None
    metadata: dict[str, Any] | None = None
    filename: str | None = None
    media_type: str | None = None


class Message(Wire, kw_only=True):
    message_id: str = ""
    context_id: str | None = None
    task_id: str | None = None
    role: Role = "ROLE_UNSPECIFIED"
    parts: list[Part] = []
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class TaskStatus(Wire, kw_only=True):
    state: TaskState
    message: Message | None = None
    timestamp: str | None = None


class Artifact(Wire, kw_only=True):
    artifact_id: str
    name: str | None = None
    description: str | None = None
    parts: list[Part] = []
    metadata: dict[str, Any] | None = None


class Task(Wire, kw_only=True):
    id: str
    context_id: str
    status: TaskStatus
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class TaskStatusUpdateEvent(Wire, kw_only=True):
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: dict[str, Any] | None = None


class TaskArtifactUpdateEvent(Wire, kw_only=True):
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False


class StreamResponse(Wire, kw_only=True):
    """One event of a stream: exactly one field set."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None


class SendMessageResponse(Wire, kw_only=True):
    task: Task | None = None
    message: Message | None = None


# --- requests ---------------------------------------------------------------------------


class AuthenticationInfo(Wire, kw_only=True):
    scheme: str = ""
    credentials: str = ""


class TaskPushNotificationConfig(Wire, kw_only=True):
    tenant: str = ""
    id: str = ""
    task_id: str = ""
    url: str = ""
    token: str = ""
    authentication: AuthenticationInfo | None = None


class SendMessageConfiguration(Wire, kw_only=True):
    accepted_output_modes: list[str] = []
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = None
    return_immediately: bool = False


class SendMessageRequest(Wire, kw_only=True):
    tenant: str = ""
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None


class GetTaskRequest(Wire, kw_only=True):
    tenant: str = ""
    id: str
    history_length: int | None = None


class ListTasksRequest(Wire, kw_only=True):
    tenant: str = ""
    context_id: str = ""
    status: str = ""
    page_size: int | None = None
    page_token: str = ""
    history_length: int | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool | None = None


class ListTasksResponse(Wire, kw_only=True):
    tasks: list[Task]
    next_page_token: str
    page_size: int
    total_size: int


class TaskIdRequest(Wire, kw_only=True):
    """CancelTask and SubscribeToTask: the task's id."""

    tenant: str = ""
    id: str
    metadata: dict[str, Any] | None = None


class PushConfigRequest(Wire, kw_only=True):
    """Get, list and delete of a task's push-notification configs."""

    tenant: str = ""
    task_id: str
    id: str = ""
    page_size: int | None = None
    page_token: str = ""


class ListPushConfigsResponse(Wire, kw_only=True):
    configs: list[TaskPushNotificationConfig]
    next_page_token: str = ""


# --- the agent card ----------------------------------------------------------------------


class AgentInterface(Wire, kw_only=True):
    url: str
    protocol_binding: Literal["JSONRPC", "HTTP+JSON", "GRPC"]
    protocol_version: str
    tenant: str | None = None


class AgentProvider(Wire, kw_only=True):
    organization: str
    url: str


class AgentCapabilities(Wire, kw_only=True):
    streaming: bool
    push_notifications: bool
    extended_agent_card: bool = False


class AgentSkill(Wire, kw_only=True):
    id: str
    name: str
    description: str
    tags: list[str]
    examples: list[str] | None = None
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None


class HttpAuthSecurityScheme(Wire, kw_only=True):
    scheme: str
    description: str = ""
    bearer_format: str = ""


class ApiKeySecurityScheme(Wire, kw_only=True):
    location: str
    name: str
    description: str = ""


class SecurityScheme(Wire, kw_only=True):
    http_auth_security_scheme: HttpAuthSecurityScheme | None = None
    api_key_security_scheme: ApiKeySecurityScheme | None = None


class StringList(Wire, kw_only=True):
    list: list[str] = []


class SecurityRequirement(Wire, kw_only=True):
    schemes: dict[str, StringList]


class AgentCard(Wire, kw_only=True):
    name: str
    description: str
    supported_interfaces: list[AgentInterface]
    provider: AgentProvider | None = None
    version: str
    documentation_url: str | None = None
    capabilities: AgentCapabilities
    security_schemes: dict[str, SecurityScheme]
    security_requirements: list[SecurityRequirement]
    default_input_modes: list[str]
    default_output_modes: list[str]
    skills: list[AgentSkill]
    icon_url: str | None = None


def decode(raw: Any, kind: type[msgspec.Struct]) -> Any:
    """A request's params (decoded JSON) as `kind`; `msgspec.ValidationError` names what
    is wrong. A field may be named by its proto name (`task_id`) as by its JSON name
    (`taskId`): proto's JSON readers accept both."""
    return msgspec.convert(_json_names(raw, _type_info(kind)), kind, strict=False)


@functools.cache
def _type_info(kind: type[msgspec.Struct]) -> msgspec.inspect.Type:
    return msgspec.inspect.type_info(kind)


def _json_names(raw: Any, kind: msgspec.inspect.Type) -> Any:
    """`raw` with the proto names of `kind`'s fields (and its messages' fields, however
    deep) as their JSON names; free-form values (`data`, `metadata`) are left as sent."""
    match kind:
        case msgspec.inspect.StructType(fields=fields) if isinstance(raw, dict):
            by_name = {f.name: f for f in fields} | {f.encode_name: f for f in fields}
            named: dict[Any, Any] = {}
            for key, value in raw.items():
                field = by_name.get(key) if isinstance(key, str) else None
                if field is None:
                    named.setdefault(key, value)
                else:
                    named[field.encode_name] = _json_names(value, field.type)
            return named
        case msgspec.inspect.ListType(item_type=item) if isinstance(raw, list):
            return [_json_names(v, item) for v in raw]
        case msgspec.inspect.UnionType(types=types):
            structs = [t for t in types if isinstance(t, msgspec.inspect.StructType)]
            return _json_names(raw, structs[0]) if len(structs) == 1 else raw
    return raw


ENCODER = msgspec.json.Encoder()
