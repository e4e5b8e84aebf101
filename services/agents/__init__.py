"""The extension API: tools, middleware, blueprints and the `AgentSystem` builder."""
