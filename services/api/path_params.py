"""The path parameters of the HTTP API, each declared once: its name on the wire (camelCase)
and its description in the OpenAPI document. A handler takes one as
`agency_id: AgencyId`; `path_id` (`services/api/auth.py`) checks its form."""

from __future__ import annotations

from typing import Annotated

from litestar.params import PathParameter

AgencyId = Annotated[str, PathParameter(name="agencyId", description="The agency's id.")]
ThreadId = Annotated[str, PathParameter(name="threadId", description="The thread's id.")]
TenantId = Annotated[str, PathParameter(name="tenantId", description="The tenant's id.")]
KeyId = Annotated[str, PathParameter(name="keyId", description="The key's id.")]
BlueprintName = Annotated[str, PathParameter(name="name", description="The code agent's name.")]
ProviderName = Annotated[
    str, PathParameter(name="name", description="A model provider's name, e.g. `openai`.")
]
RequestId = Annotated[
    str,
    PathParameter(name="requestId", description="The request id of `subagent_env_required`."),
]
WebhookId = Annotated[
    str, PathParameter(name="webhookId", description="The webhook subscription's id.")
]
WorkflowRef = Annotated[
    str, PathParameter(name="workflow", description="A workflow id, or name / name:tag.")
]
