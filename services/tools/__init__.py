"""The tools service: executes the tool calls the runtime requests, one result per call id."""

from agency.services.tool_execution.executor import InvalidArguments, execute, parse_arguments
from agency.services.tools.service import ToolsService, run_tools_service

__all__ = ["InvalidArguments", "ToolsService", "execute", "parse_arguments", "run_tools_service"]
