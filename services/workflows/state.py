"""The workflow state's old place, kept only for `services.agents.builtin.workflow` until
the extension API change moves it off it; everything else imports `domain.workflow_state`."""

from domain.workflow_state import WorkflowState as WorkflowState
from domain.workflow_state import fold as fold
