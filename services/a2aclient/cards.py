"""A remote agent's card: fetched where the egress policy allows, within a bounded time,
kept for a while.

The blueprint names the card's URL (`RemoteAgent.url`); it is fetched with the agent's
headers (a reference `${ENV:NAME}` resolved from this process's environment), through
`guarded_httpx_transport`, so every connection, the card's and the messages' (the card
may name another host), is checked by the egress rule (`services/egress.py`). A card is
kept for `ttl` seconds; a failed fetch is not kept.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field

import httpx
import msgspec
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from google.protobuf.json_format import ParseError

from agency.contracts.events import RemoteAgent
from agency.services.egress import EgressPolicy, EgressRefused, guarded_httpx_transport
from agency.services.env_references import UnsetReference, resolved

CARD_TTL = 300.0
CARD_TIMEOUT = 10.0


class RemoteAgentError(Exception):
    """A remote agent could not be reached or did not answer as A2A says; the message is
    what the model reads."""

    def __init__(self, agent: str, problem: str) -> None:
        self.agent = agent
        self.problem = problem
        super().__init__(f"remote agent {agent!r}: {problem}")


def headers_of(agent: RemoteAgent, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The agent's headers with `${ENV:NAME}` references resolved."""
    try:
        return resolved(agent.headers, "header", os.environ if environ is None else environ)
    except UnsetReference as e:
        raise RemoteAgentError(agent.name, str(e)) from e


def http_client(agent: RemoteAgent, egress: EgressPolicy, timeout: float) -> httpx.AsyncClient:
    """A client for one agent: its headers, the egress rule on every connection, no proxy
    from the environment, no redirect followed."""
    return httpx.AsyncClient(
        headers=headers_of(agent),
        timeout=httpx.Timeout(CARD_TIMEOUT, read=timeout),
        transport=guarded_httpx_transport(egress),
        trust_env=False,
        follow_redirects=False,
    )


def unreachable(agent: RemoteAgent, error: BaseException) -> RemoteAgentError:
    """The error the model reads for a failure to connect (an egress refusal named as one)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, EgressRefused):
            return RemoteAgentError(agent.name, str(cause))
        cause = cause.__cause__ or cause.__context__
    detail = str(error) or type(error).__name__
    return RemoteAgentError(agent.name, f"unreachable at {agent.url[:200]}: {detail}")


@dataclass(frozen=True, slots=True)
class _Kept:
    card: AgentCard
    at: float


@dataclass(eq=False)
class RemoteCards:
    """The cards of remote agents, cached per agent configuration."""

    _: KW_ONLY
    ttl: float = CARD_TTL
    timeout: float = CARD_TIMEOUT
    egress: EgressPolicy | None = None
    own_urls: tuple[str, ...] = ()
    _kept: dict[bytes, _Kept] = field(default_factory=dict, init=False)
    _locks: dict[bytes, asyncio.Lock] = field(default_factory=dict, init=False)

    def policy(self) -> EgressPolicy:
        """The policy given, or the environment's (`AGENCY_ALLOW_HOSTS`) as it is now."""
        return self.egress or EgressPolicy.from_env(own_urls=self.own_urls)

    async def card(self, agent: RemoteAgent) -> AgentCard:
        """The agent's card; `RemoteAgentError` saying why not within `timeout` seconds."""
        loop = asyncio.get_running_loop()
        key = msgspec.json.encode(agent)
        async with self._locks.setdefault(key, asyncio.Lock()):
            kept = self._kept.get(key)
            if kept is not None and loop.time() - kept.at < self.ttl:
                return kept.card
            card = await self._fetch(agent)
            self._kept[key] = _Kept(card, loop.time())
            return card

    async def _fetch(self, agent: RemoteAgent) -> AgentCard:
        policy = self.policy()
        try:
            async with asyncio.timeout(self.timeout):
                await policy.check_url(agent.url)
                async with http_client(agent, policy, self.timeout) as http:
                    response = await http.get(agent.url)
        except TimeoutError:
            raise RemoteAgentError(
                agent.name, f"no agent card from {agent.url[:200]} within {self.timeout:g} s"
            ) from None
        except (EgressRefused, httpx.HTTPError) as e:
            raise unreachable(agent, e) from e
        if response.status_code != 200:
            raise RemoteAgentError(
                agent.name,
                f"its agent card at {agent.url[:200]} answered HTTP {response.status_code}: "
                f"{response.text[:300]}",
            )
        try:
            return parse_agent_card(response.json())
        except (ValueError, ParseError) as e:
            raise RemoteAgentError(
                agent.name, f"{agent.url[:200]} is not an agent card: {str(e)[:300]}"
            ) from e
