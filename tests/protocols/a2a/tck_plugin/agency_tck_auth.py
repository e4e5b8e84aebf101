"""A pytest plugin loaded into the TCK's run (`tests/protocols/a2a/tck.py`): it gives the
TCK the agent card as a client of Agency finds it (docs/protocols.md).

- The card is fetched with the tenant's key: a card is the tenant's, and the TCK fetches
  it with a session that carries none (its other requests carry the key it is given).
- The card is the agent's own, under its URL (`/a2a/{agencyId}/{blueprint}/.well-known/
  agent-card.json`), as the TCK's `--sut-url` names it: the TCK reads the card at the
  host's root, which Agency answers with the tenant's catalogue of agents, reached by
  naming one in `tenant`, which the TCK never sends.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import requests


def _agent_card(sut_base_url: str, session: requests.Session) -> dict[str, Any] | None:
    response = session.get(
        f"{sut_base_url.rstrip('/')}/.well-known/agent-card.json",
        headers={"Authorization": f"Bearer {os.environ['A2A_AUTH_TOKEN']}"},
        timeout=10,
    )
    if response.status_code != 200:
        return None
    card: dict[str, Any] = response.json()
    return card


def pytest_sessionstart(session: pytest.Session) -> None:
    """Once the TCK's own modules are loaded (importing them sooner is a circle of theirs)."""
    from tck import agent_card_utils
    from tck.transport import transport_manager

    agent_card_utils.fetch_agent_card = _agent_card
    transport_manager.fetch_agent_card = _agent_card
