"""The agency named `default`: where the CLI and the LangGraph routes work unless told
another (`docs/langgraph.md`, "Which agency"). `agency up` makes it for its tenant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agency.services.client import AsyncAgencyClient

DEFAULT_AGENCY = "default"


async def ensure_default_agency(client: AsyncAgencyClient) -> str:
    """The tenant's agency named `default`, created on first use; its id."""
    for agency in await client.list_agencies():
        if agency.name == DEFAULT_AGENCY:
            return agency.id
    return (await client.create_agency(DEFAULT_AGENCY)).id
