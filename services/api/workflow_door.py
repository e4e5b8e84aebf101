"""A workflow's members are checked as the registry will check their blueprints before the
workflow is sent: what it would refuse answers 400 with the reason (403 for an address the
egress rule refuses), instead of a create that waits for blueprints that never come (and
dead-letters)."""

from __future__ import annotations

from collections.abc import Iterable

from litestar.exceptions import PermissionDeniedException, ValidationException

from agency.contracts.events import BlueprintSpec
from agency.domain.workflow_members import member_blueprint
from agency.services.api.deps import ApiDeps
from agency.services.tenancy.blueprint_checks import save_refusal


def refuse_members(
    deps: ApiDeps, workflow_name: str, members: Iterable[tuple[str, BlueprintSpec]]
) -> None:
    for name, spec in members:
        refused = save_refusal(member_blueprint(workflow_name, name, spec), deps.door)
        if refused is None:
            continue
        reason, detail = refused
        if reason == "egress_refused":  # well formed, and forbidden (`egress_door`)
            raise PermissionDeniedException(f"workflow definition: agents.{name}: {detail}")
        raise ValidationException(f"invalid workflow definition: agents.{name}: {detail}")
