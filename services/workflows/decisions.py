"""The workflow decisions' old place, kept only for `services.agents.builtin.workflow`
until the extension API change moves it off it; everything else imports
`domain.workflow_decisions`."""

from domain.workflow_decisions import WorkflowRejected as WorkflowRejected
from domain.workflow_decisions import open_proposal as open_proposal
from domain.workflow_decisions import post as post
from domain.workflow_decisions import resource_id as resource_id
from domain.workflow_decisions import store_resource as store_resource
from domain.workflow_decisions import vote as vote
