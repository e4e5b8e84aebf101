"""`${ENV:NAME}` references in an MCP server's and a remote agent's headers and env values
resolve from the connecting process's environment, inside a value too; an unset one is an
error naming the server or agent, the key and the variable."""

from __future__ import annotations

import pytest

from agency.contracts.events import McpServer, RemoteAgent
from agency.services.a2aclient.cards import RemoteAgentError, headers_of
from agency.services.mcpclient.config import McpConfigError, resolve

ENVIRON = {"AGENCY_TEST_TOKEN": "s3cret", "AGENCY_TEST_HOME": "/srv"}


def test_an_mcp_servers_references_resolve_inside_headers_and_env_values() -> None:
    http = McpServer(
        name="calc", url="http://calc/mcp", headers={"A": "Bearer ${ENV:AGENCY_TEST_TOKEN}"}
    )
    stdio = McpServer(name="fs", command=("fs",), env={"ROOT": "${ENV:AGENCY_TEST_HOME}/data"})
    assert resolve(http, ENVIRON).headers == (("A", "Bearer s3cret"),)
    assert resolve(stdio, ENVIRON).env == (("ROOT", "/srv/data"),)


def test_an_mcp_servers_unset_reference_names_the_server_the_key_and_the_variable() -> None:
    server = McpServer(name="fs", command=("fs",), env={"ROOT": "${ENV:AGENCY_TEST_UNSET}"})
    with pytest.raises(McpConfigError) as raised:
        resolve(server, ENVIRON)
    assert str(raised.value) == (
        "MCP server 'fs': env 'ROOT' references ${ENV:AGENCY_TEST_UNSET}, which is not set "
        "in this service's environment"
    )


def test_a_remote_agents_header_references_resolve_and_an_unset_one_names_the_agent() -> None:
    agent = RemoteAgent(
        name="helper", url="http://helper/card", headers={"A": "Bearer ${ENV:AGENCY_TEST_TOKEN}"}
    )
    assert headers_of(agent, ENVIRON) == {"A": "Bearer s3cret"}
    with pytest.raises(RemoteAgentError) as raised:
        headers_of(agent, {})
    assert str(raised.value) == (
        "remote agent 'helper': header 'A' references ${ENV:AGENCY_TEST_TOKEN}, which is not "
        "set in this service's environment"
    )
