"""`agency up`: NATS, PostgreSQL, every service, the API and the fake model, one command.

This process runs NATS and PostgreSQL (as its children), the fake model and the API; on a
machine of 4 cores or more each service runs in a worker process of its own, `agency serve
NAME` (`up_processes.py`), so that they use every core; with fewer, all run in this process
(`--processes services|single` chooses either).
Each service and the API are supervised: one that fails (or whose process dies) is restarted
with backoff, the others go on, and `/readyz` shows which is `restarting`.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

from agency.services.cli.arguments import (
    add_app,
    add_data_dir,
    agent_system,
    data_dir,
    print_urls,
)
from agency.services.cli.up_processes import add_processes, in_processes, service_processes


def register(groups: Any) -> None:
    up = groups.add_parser(
        "up", help="bring up NATS, PostgreSQL, every service and the API, in the foreground"
    )
    add_data_dir(up)
    add_app(up)
    up.add_argument("--host", default="127.0.0.1", help="API host (default 127.0.0.1)")
    up.add_argument(
        "--port", type=int, default=int(os.environ.get("AGENCY_API_PORT", "8080")),
        help="API port (default $AGENCY_API_PORT or 8080; 0 = a free one)",
    )  # fmt: skip
    add_processes(up)
    up.set_defaults(handler=agency_up)


async def agency_up(args: argparse.Namespace) -> int:
    import asyncio

    from agency.infra.db import create_pool
    from agency.infra.endpoints import Endpoints, remove_endpoints, write_endpoints
    from agency.infra.gc_tuning import tune_gc
    from agency.infra.jetstream.connection import Bus
    from agency.infra.keystore.operator import use_operator_key_of
    from agency.infra.nats_auth import SERVICE_ROLES, CredentialIssuer
    from agency.infra.sealing import use_key_of
    from agency.infra.settings import InfraSettings
    from agency.infra.system import Infrastructure
    from agency.projections.setup import prepare_read_models
    from agency.services.api.cors import CorsSettings
    from agency.services.api.deps import ApiDeps, ApiSettings
    from agency.services.api.forwarded import TrustedProxies
    from agency.services.api.server import run_api
    from agency.services.api.tenant_scope import scope_session
    from agency.services.cli.agencies import ensure_default_agency
    from agency.services.cli.bootstrap import ensure_default_tenant, load_credentials
    from agency.services.cli.signals import stop_on_signals
    from agency.services.client import AsyncAgencyClient
    from agency.services.llm.catalog import ProviderCatalog
    from agency.services.llm.fake_server import FakeLLMServer
    from agency.services.llm.router import provider_from_env
    from agency.services.stack import StackConfig, service_runners
    from agency.services.supervisor import Supervisor

    tune_gc()  # after the imports: what they loaded lives as long as the process
    directory = data_dir(args)
    use_key_of(directory)
    use_operator_key_of(directory)
    stop = stop_on_signals()
    system = agent_system(args)
    models = ProviderCatalog.from_env()
    use_fake = models.offline
    async with AsyncExitStack() as stack:
        urls = await stack.enter_async_context(Infrastructure(directory, InfraSettings.from_env()))
        fake = await stack.enter_async_context(FakeLLMServer()) if use_fake else None
        provider = provider_from_env(fake.base_url if fake else None)
        pool = await create_pool(urls.database_url, max_size=10, setup=scope_session)
        stack.push_async_callback(pool.close)
        await prepare_read_models(pool)
        bus = await stack.enter_async_context(Bus(urls.nats_url_for("api"), name="agency-api"))
        credentials = load_credentials(directory)
        config = StackConfig(
            nats_url=urls.nats_url,
            database_url=urls.database_url,
            system=system,
            provider=provider,
            nats_urls={name: urls.nats_url_for(name) for name in SERVICE_ROLES},
            nats_credentials=(
                CredentialIssuer(urls.nats_auth, urls.nats_url) if urls.nats_auth else None
            ),
        )
        runners = service_runners(config)
        if children := in_processes(args.processes):
            runners |= service_processes(
                children,
                directory=directory,
                database_url=urls.database_url,
                nats_urls=config.nats_urls,
                fake_model_url=fake.base_url if fake else None,
                args=args,
            )
        api_ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        port = args.port

        async def serve_api(stop: asyncio.Event) -> None:
            def ready(url: str) -> None:
                # A restarted API comes back on the same port: clients keep their URL.
                nonlocal port
                port = int(url.rsplit(":", 1)[1])
                if not api_ready.done():
                    api_ready.set_result(url)

            await run_api(deps, args.host, port, stop, ready=ready)

        supervisor = Supervisor(
            {**{name: runners[name] for name in config.services}, "api": serve_api}
        )
        deps = ApiDeps(
            pool=pool,
            bus=bus,
            system=system,
            settings=ApiSettings(
                admin_secret=credentials.admin_secret,
                cors=CorsSettings.from_env(default="local"),
                trusted_proxies=TrustedProxies.from_env(),
            ),
            services=supervisor.states,
            models=models,
            nats_credentials=config.nats_credentials,
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(supervisor.run(stop))
            try:
                try:
                    api_url = await asyncio.wait_for(api_ready, timeout=30)
                except TimeoutError:
                    error = supervisor.statuses()["api"].last_error
                    print(f"the API did not start within 30 s: {error}", file=sys.stderr)
                    return 1
                credentials = await ensure_default_tenant(deps, credentials, directory)
                assert credentials.api_key is not None
                async with AsyncAgencyClient(api_url, credentials.api_key) as client:
                    await ensure_default_agency(client)
                endpoints = Endpoints(
                    pid=os.getpid(),
                    nats_url=urls.nats_url,
                    database_url=urls.database_url,
                    api_url=api_url,
                    tenant_id=credentials.tenant_id,
                    api_key=credentials.api_key,
                    admin_secret=credentials.admin_secret,
                    services=(*config.services, "api"),
                    extra={"fake_llm_url": fake.base_url} if fake else {},
                    nats_auth_dir=str(urls.nats_auth.directory) if urls.nats_auth else None,
                )
                write_endpoints(directory, endpoints)
                print(f"api:      {api_url}  (docs: {api_url}/schema)", flush=True)
                print(f"dashboard: {api_url}/#key={credentials.api_key}", flush=True)
                print(f"tenant:   {credentials.tenant_id}", flush=True)
                print(f"api key:  {credentials.api_key}", flush=True)
                served = ", ".join(sorted(models.configured)) or "fake (offline)"
                print(f"models:   {served}", flush=True)
                print_urls(urls.nats_url, urls.database_url)
                print("ready; try `agency demo`; Ctrl-C to stop", flush=True)
                await stop.wait()
            finally:
                # Whatever ended the wait (a signal, a failed start), services stop cleanly.
                stop.set()
                remove_endpoints(directory, os.getpid())
    print("stopped", flush=True)
    return 0
