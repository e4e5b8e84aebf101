"""Every service in one process, as `agency up` runs them; each can also run alone.

Each service is supervised (`services/supervisor.py`): one that fails is restarted with
backoff while the others go on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agency.infra.nats_auth import SERVICE_ROLES, CredentialIssuer
from agency.services.agents.system import AgentSystem
from agency.services.gateway.service import run_gateway
from agency.services.llm.provider import Provider
from agency.services.projector.service import run_projector
from agency.services.registry.service import run_registry
from agency.services.runtime.process import run_runtime
from agency.services.subagents.service import run_coordinator
from agency.services.supervisor import ServiceRunner, Supervisor
from agency.services.tools.service import run_tools_service
from agency.services.webhooks.service import run_webhooks
from agency.services.workflows.engine.service import WorkflowSettings, run_workflows


@dataclass
class StackConfig:
    nats_url: str
    database_url: str
    system: AgentSystem
    provider: Provider
    # Every service but the API, which `agency up` serves itself.
    services: tuple[str, ...] = tuple(r for r in SERVICE_ROLES if r != "api")
    # Seconds before work a killed worker held is redelivered to another.
    runtime_ack_wait: float = 30.0
    tools_ack_wait: float = 30.0
    # The webhooks service's durables: deliveries, and deletions carried out from the log.
    webhooks_ack_wait: float = 120.0
    extra: dict[str, ServiceRunner] = field(default_factory=dict)
    # Each service's own NATS URL (its user and permissions); `nats_url` for any not named.
    nats_urls: dict[str, str] = field(default_factory=dict)
    # The code re-execution runs, when not `system` (the console's tests: newer code).
    reexecution_system: AgentSystem | None = None
    # The tenants' NATS users, where Agency manages the server's (a deleted tenant's is
    # removed by whichever process finishes the deletion).
    nats_credentials: CredentialIssuer | None = None

    def nats_for(self, service: str) -> str:
        return self.nats_urls.get(service, self.nats_url)


def service_runners(config: StackConfig) -> dict[str, ServiceRunner]:
    c = config
    runners: dict[str, ServiceRunner] = {
        "registry": lambda stop: run_registry(
            c.nats_for("registry"), c.database_url, stop, c.system
        ),
        "runtime": lambda stop: run_runtime(
            c.nats_for("runtime"),
            c.database_url,
            stop,
            c.system,
            c.provider,
            ack_wait=c.runtime_ack_wait,
            reexecution_system=c.reexecution_system,
        ),
        "tools": lambda stop: run_tools_service(
            c.nats_for("tools"), c.database_url, stop, c.system, ack_wait=c.tools_ack_wait
        ),
        "subagents": lambda stop: run_coordinator(
            c.nats_for("subagents"), c.database_url, stop, c.system, ack_wait=c.runtime_ack_wait
        ),
        "workflows": lambda stop: run_workflows(
            c.nats_for("workflows"),
            c.database_url,
            stop,
            WorkflowSettings(ack_wait=c.runtime_ack_wait),
        ),
        "projector": lambda stop: run_projector(c.nats_for("projector"), c.database_url, stop),
        "gateway": lambda stop: run_gateway(c.nats_for("gateway"), stop),
        "webhooks": lambda stop: run_webhooks(
            c.nats_for("webhooks"),
            c.database_url,
            stop,
            ack_wait=c.webhooks_ack_wait,
            nats_users=c.nats_credentials,
        ),
    }
    runners.update(c.extra)
    return runners


def stack_supervisor(config: StackConfig) -> Supervisor:
    runners = service_runners(config)
    return Supervisor({name: runners[name] for name in config.services})


async def run_stack(config: StackConfig, stop: asyncio.Event) -> None:
    await stack_supervisor(config).run(stop)
