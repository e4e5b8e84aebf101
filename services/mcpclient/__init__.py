"""MCP servers' tools as agent tools: sessions, listing for the model, calls (`docs/mcp.md`)."""

from agency.services.mcpclient.config import McpConfigError, exposed_name
from agency.services.mcpclient.sessions import McpSessionLost, McpSessions, McpUnavailable
from agency.services.mcpclient.tools import McpCatalog, mcp_tool

__all__ = [
    "McpCatalog",
    "McpConfigError",
    "McpSessionLost",
    "McpSessions",
    "McpUnavailable",
    "exposed_name",
    "mcp_tool",
]
