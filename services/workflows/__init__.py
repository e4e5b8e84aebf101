"""Workflows: agents working together on a shared channel, the whole feature in one folder.

Each part sits in the layer it belongs to (`pyproject.toml`, `[tool.importlinter]`):
`definition` (workflow files) and `context_tools` (what a member's channel, document,
resource and proposal tools do) are shared libraries; `engine/` is the workflows service
(commands, the controller, schedules); `http/` is the API's routes for workflows; `cli/`
holds the `agency workflow` commands and workflow replay. The `workflow` middleware that
declares the members' tools belongs to the agents API (`services/agents/builtin/workflow.py`).
"""
