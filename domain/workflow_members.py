"""Names of workflows and their members, and the blueprint a member's thread runs."""

from __future__ import annotations

import hashlib

import msgspec

from agency.contracts.events import BlueprintSpec
from agency.contracts.ids import derived_id

WORKFLOW_TAG = "workflow"
GLOBAL = "global"


def workflow_id(tenant_id: str, agency_id: str, name: str, tag: str = "") -> str:
    """The same (agency, name, tag) always names the same workflow, so `@review:pr-1` is
    found without a lookup and running a definition again reuses its workflow."""
    return derived_id("wf_", tenant_id, agency_id, name, tag)


def global_workflow_id(tenant_id: str, agency_id: str) -> str:
    """Each agency's `@global` workflow, home of standalone agents."""
    return workflow_id(tenant_id, agency_id, GLOBAL)


def parse_target(target: str) -> tuple[str, str]:
    """`@review:pr-1` → ("review", "pr-1"); `@global` → ("global", "")."""
    name, _, tag = target.removeprefix("@").partition(":")
    return name, tag


def member_blueprint(workflow_name: str, member: str, base: BlueprintSpec) -> BlueprintSpec:
    """The member's blueprint: the base one with the workflow's context tools (tag
    `workflow`) and a preamble saying who it is. Its name is derived from its content, so
    the same definition saves it once and a changed one never alters a running member."""
    prompt = (
        f"You are @{member}, a member of the workflow @{workflow_name}. Other members "
        "act when you mention them (@name) in your answer, which is posted to the shared "
        "channel. You have tools for the channel, your inbox, team documents, resources "
        "and proposals."
    )
    if base.prompt:
        prompt += "\n\n" + base.prompt
    tags = base.tags if WORKFLOW_TAG in base.tags else (*base.tags, WORKFLOW_TAG)
    draft = msgspec.structs.replace(base, name="", prompt=prompt, tags=tags, expose_as_tool=False)
    digest = hashlib.sha256(msgspec.json.encode(draft)).hexdigest()[:10]
    name = f"wf-{workflow_name}-{member}"[:53] + f"-{digest}"
    return msgspec.structs.replace(draft, name=name)


def workflow_request(workflow_id: str, member: str) -> dict[str, str]:
    """What a member thread's `thread.created` carries to find its workflow again."""
    return {"workflow_id": workflow_id, "member": member}
