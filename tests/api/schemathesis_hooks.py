"""schemathesis hooks for tests/api/test_openapi_conformance.py (loaded by its CLI through
`SCHEMATHESIS_HOOKS`; the test passes the server and credentials in the environment).

Credentials, and one rewrite of generated bodies. Admin routes get the admin secret,
every other route a key of the tenant `agency up` made. The fuzzer may well rotate or
revoke that very key (it is listed by `GET /keys` and its id is in the key): the answer is
then 401, schemathesis drops the cached key and the next request gets a fresh one, issued
by the admin.

The rewrite: a blueprint's `config.hitl.tools` must name tools of that blueprint, which
depend on its tags and MCP servers, so the document cannot list them (it does list the
tags and `hooks` the system has, as enums). In a body generated as valid, each name there
is replaced by one the blueprint has (`guarded_names`); every other case is sent as
generated.
"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
import schemathesis
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation

ADMIN_ROUTES = re.compile(r"^/(tenants|dlq|metrics)(/|$)")


def _admin_route(case: Any) -> bool:
    return bool(ADMIN_ROUTES.match(case.operation.path))


@schemathesis.auth(cache_by_key=lambda case, _: "admin" if _admin_route(case) else "tenant")
class Credentials:
    def __init__(self) -> None:
        self.url = os.environ["AGENCY_TEST_URL"]
        self.admin = os.environ["AGENCY_TEST_ADMIN_SECRET"]
        self.tenant = os.environ["AGENCY_TEST_TENANT"]
        self.first_key: str | None = os.environ["AGENCY_TEST_KEY"]

    def get(self, case: Any, _: Any) -> str:
        if _admin_route(case):
            return self.admin
        if self.first_key is not None:
            key, self.first_key = self.first_key, None
            return key
        response = httpx.post(
            f"{self.url}/tenants/{self.tenant}/keys",
            json={"name": "schemathesis"},
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=15,
        )
        response.raise_for_status()
        issued: str = response.json()["apiKey"]
        return issued

    def set(self, case: Any, data: str, _: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


# The tools every blueprint has, whatever its tags (`services/agents/checks.py`,
# `tool_names`): a name among them is never refused.
ALWAYS_THERE = ("notify_parent", "set_status")
NUL = "\x00"


def guarded_names(names: list[Any], config: dict[str, Any]) -> list[Any]:
    """`names` (a generated `hitl.tools`) onto tools of the blueprint whose `config` holds
    them: each string becomes one of `ALWAYS_THERE`, or `<server>__<name>` for an MCP
    server the blueprint lists (the two forms the API accepts for any system). A value no
    valid body holds (not a string, or holding NUL) is left as it is."""
    servers = [
        server["name"]
        for server in config.get("mcpServers", config.get("mcp_servers")) or []
        if isinstance(server, dict) and isinstance(server.get("name"), str)
    ]
    mapped: list[Any] = []
    for i, name in enumerate(names):
        if not isinstance(name, str) or NUL in name:
            mapped.append(name)
        elif servers and i % 2:
            mapped.append(f"{servers[i % len(servers)]}__{name or 'tool'}")
        else:
            mapped.append(ALWAYS_THERE[i % len(ALWAYS_THERE)])
    return mapped


def _guard_known_tools(value: Any) -> None:
    """Rewrite, in place, the `config.hitl.tools` of every blueprint in a body (a saved
    one, a workflow's inline members, inline subagents at any depth)."""
    if isinstance(value, list):
        for item in value:
            _guard_known_tools(item)
        return
    if not isinstance(value, dict):
        return
    config = value.get("config")
    hitl = config.get("hitl") if isinstance(config, dict) else None
    if isinstance(config, dict) and isinstance(hitl, dict) and isinstance(hitl.get("tools"), list):
        hitl["tools"] = guarded_names(hitl["tools"], config)
    for item in value.values():
        _guard_known_tools(item)


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    """Only a body generated as valid is rewritten: a negative one stays as invalid as it
    was drawn (the coverage phase applies case hooks only, hence a case hook)."""
    body = case.meta.components.get(ParameterLocation.BODY) if case.meta is not None else None
    if body is not None and body.mode == GenerationMode.POSITIVE:
        _guard_known_tools(case.body)
    return case
