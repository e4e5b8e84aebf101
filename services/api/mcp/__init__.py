"""Agency as an MCP server at `/mcp`: tools, thread files as resources, blueprints as
prompts, log notifications, and the protected-resource metadata a client reads on a 401."""
