"""`agency serve NAME`: run one service in the foreground against a running system.

Several copies of a service may run at once (against one NATS): they share its durable
consumers, so each command and event is handled by one of them. The service is supervised:
when it fails it is logged and restarted with backoff, the process goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agency.infra.roles import SERVICE_ROLES
from agency.services.cli.arguments import (
    add_app,
    add_data_dir,
    agent_system,
    data_dir,
    running_endpoints,
)

if TYPE_CHECKING:
    import asyncio

    from agency.infra.endpoints import Endpoints
    from agency.infra.nats_auth import CredentialIssuer
    from agency.services.agents.system import AgentSystem
    from agency.services.llm.provider import Provider
    from agency.services.supervisor import ServiceRunner

# Every service `agency up` runs, the API among them; each connects as its own NATS user.
SERVICES = SERVICE_ROLES


def register(groups: Any) -> None:
    serve = groups.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=SERVICES, help="which service")
    add_data_dir(serve)
    add_app(serve)
    serve.add_argument(
        "--ack-wait",
        type=float,
        default=30.0,
        help="seconds before work a killed worker held is redelivered to another",
    )
    serve.add_argument("--host", default="127.0.0.1", help="api: host to listen on")
    serve.add_argument("--port", type=int, default=0, help="api: port (default: a free one)")
    metrics_port = os.environ.get("AGENCY_METRICS_PORT", "").strip()
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=int(metrics_port) if metrics_port.isdigit() else None,
        help="serve this process's metrics (its outage waits, Prometheus text) at "
        "http://HOST:PORT/metrics (default $AGENCY_METRICS_PORT; none when unset)",
    )
    serve.set_defaults(handler=serve_service)


class _NoModel:
    """For services that never call a model: only the runtime needs a provider."""

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this service does not call models")


async def serve_service(args: argparse.Namespace) -> int:
    """Run the service until SIGINT / SIGTERM; it is restarted with backoff when it fails."""
    from agency.infra.gc_tuning import tune_gc
    from agency.infra.keystore.operator import use_operator_key_of
    from agency.infra.nats_auth import role_url
    from agency.infra.sealing import use_key_of
    from agency.services.cli.signals import stop_on_signals
    from agency.services.cli.up_processes import endpoints_from_env
    from agency.services.llm.router import provider_from_env
    from agency.services.stack import StackConfig, service_runners
    from agency.services.supervisor import Supervisor

    if args.service == "api":
        import agency.services.api.server  # noqa: F401  (loaded before the freeze below)
    tune_gc()  # after the imports: what they loaded lives as long as the process
    endpoints = endpoints_from_env() or running_endpoints(args)
    use_key_of(data_dir(args))
    use_operator_key_of(data_dir(args))
    stop = stop_on_signals()
    system = agent_system(args)
    runner: ServiceRunner
    if args.service == "api":
        secret = os.environ.get("AGENCY_ADMIN_SECRET") or endpoints.admin_secret
        nats_url = role_url(endpoints.nats_url, endpoints.nats_auth_dir, "api")
        api = _Api(nats_url, endpoints.database_url, system, secret, args.host, args.port)
        api.issuer = _issuer(endpoints)
        runner = api.serve
    else:
        provider: Provider = _NoModel()
        if args.service == "runtime":
            fake_url = endpoints.extra.get("fake_llm_url") if endpoints.extra else None
            provider = provider_from_env(fake_url if isinstance(fake_url, str) else None)
        config = StackConfig(
            nats_url=role_url(endpoints.nats_url, endpoints.nats_auth_dir, args.service),
            database_url=endpoints.database_url,
            system=system,
            provider=provider,
            runtime_ack_wait=args.ack_wait,
            tools_ack_wait=args.ack_wait,
            webhooks_ack_wait=args.ack_wait,
            nats_credentials=_issuer(endpoints),
        )
        runner = service_runners(config)[args.service]
    with _metrics_served(args.host, args.metrics_port):
        await Supervisor({args.service: runner}).run(stop)
    return 0


@contextlib.contextmanager
def _metrics_served(host: str, port: int | None) -> Iterator[None]:
    """The process's own metrics (`infra/outage.py`) on `port` while inside (None: not)."""
    if port is None:
        yield
        return
    from prometheus_client import start_http_server

    from agency.infra import outage

    server, thread = start_http_server(port, addr=host, registry=outage.REGISTRY)
    print(f"metrics: http://{host}:{server.server_port}/metrics", flush=True)
    try:
        yield
    finally:
        server.shutdown()  # its loop looks every 0.5 s
        server.server_close()
        thread.join(timeout=5)


def _issuer(endpoints: Endpoints) -> CredentialIssuer | None:
    from agency.infra.nats_auth import CredentialIssuer, NatsAuth

    if not endpoints.nats_auth_dir:
        return None
    return CredentialIssuer(NatsAuth(Path(endpoints.nats_auth_dir)), endpoints.nats_url)


@dataclass(eq=False)
class _Api:
    """The API on its own; a restart keeps the port the first start got."""

    nats_url: str
    database_url: str
    system: AgentSystem
    admin_secret: str | None
    host: str
    port: int
    issuer: CredentialIssuer | None = None

    def _ready(self, url: str) -> None:
        self.port = int(url.rsplit(":", 1)[1])
        print(f"api: {url}", flush=True)

    async def serve(self, stop: asyncio.Event) -> None:
        import asyncio

        from agency.infra.db import create_pool, migrate
        from agency.infra.jetstream.connection import Bus
        from agency.projections.setup import prepare_read_models
        from agency.services.api.cors import CorsSettings
        from agency.services.api.deps import ApiDeps, ApiSettings
        from agency.services.api.forwarded import TrustedProxies
        from agency.services.api.server import run_api
        from agency.services.api.tenant_scope import scope_session
        from agency.services.llm.catalog import ProviderCatalog

        pool = await create_pool(self.database_url, setup=scope_session)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
            await prepare_read_models(pool)
            async with Bus(self.nats_url, name="agency-api") as bus:
                deps = ApiDeps(
                    pool=pool,
                    bus=bus,
                    system=self.system,
                    settings=ApiSettings(
                        admin_secret=self.admin_secret,
                        cors=CorsSettings.from_env(),
                        trusted_proxies=TrustedProxies.from_env(),
                    ),
                    nats_credentials=self.issuer,
                    models=ProviderCatalog.from_env(),
                )
                await run_api(deps, self.host, self.port, stop, ready=self._ready)
        finally:
            await asyncio.wait_for(pool.close(), timeout=10)
