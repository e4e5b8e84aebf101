"""Tool execution's old place, kept only for `services.agents.testing`, which names it
until the extension API change moves it off the services; everything else imports
`services.common.tool_executor`."""

from services.common.tool_executor import execute as execute
