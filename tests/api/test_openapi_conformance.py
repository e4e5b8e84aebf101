"""The OpenAPI document tells the truth: schemathesis, every check, against the real server.

schemathesis generates valid and invalid requests for every operation from
`/schema/openapi.json` and checks each answer: no server error, every status code and body
documented and matching its schema, invalid input refused, valid input accepted, `Allow` on
405, auth enforced. It runs as its own process (its CLI), against the package's server with
the default settings (the 1 MiB body limit) and the workflows service beside it, over every
route: tenant routes with a tenant's key, admin routes with the admin secret
(`schemathesis_hooks.py`). Two routes are not in the document: the WebSocket (OpenAPI
cannot describe one; tests/api/test_streams.py holds it to its contract) and `/mcp`, which
speaks MCP (tests/mcp).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from pathlib import Path

import httpx
import pytest

from infra.launch import NatsServer
from infra.nats_auth import CredentialIssuer
from services.api.deps import ApiSettings
from services.workflows.service import WorkflowSettings, run_workflows
from tests.api.conftest import Api, Tenant, create_thread, running_api

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
# Examples per operation and phase: with the coverage phase's own cases, ~3000 requests in
# about two minutes of CPU (the bounds below allow for a runner shared with other jobs).
MAX_EXAMPLES = 10


@pytest.mark.timeout(900)
async def test_schemathesis_finds_no_failure(
    api: Api,
    nats_url: str,
    nats_server: NatsServer | None,
    client: httpx.AsyncClient,
    tenant_a: Tenant,
    tmp_path: Path,
) -> None:
    await create_thread(client, tenant_a)  # something for the list routes to return
    settings = dataclasses.replace(api.settings, max_body_bytes=ApiSettings().max_body_bytes)
    deps = dataclasses.replace(api.deps, settings=settings)
    extra: list[str] = []
    if nats_server is not None and nats_server.auth is not None:
        # As `agency up` runs it: Agency manages the NATS server's users.
        deps = dataclasses.replace(
            deps, nats_credentials=CredentialIssuer(nats_server.auth, nats_server.url)
        )
    else:
        # An external server's users are its operator's: the route answers 501, as
        # tests/api/test_keys.py checks.
        extra = ["--exclude-path", "/tenants/{tenantId}/nats-credentials"]
    stop = asyncio.Event()
    workflows = asyncio.create_task(
        run_workflows(nats_url, api.database_url, stop, WorkflowSettings(schedules=False))
    )
    try:
        async with running_api(deps) as url:
            text, code = await _schemathesis(url, api, tenant_a, tmp_path, extra)
    finally:
        stop.set()
        await asyncio.wait_for(workflows, timeout=20)
    assert code == 0, text
    assert "No issues found" in text or "passed" in text, text


async def _schemathesis(
    url: str, api: Api, tenant: Tenant, report: Path, extra: list[str]
) -> tuple[str, int]:
    assert api.settings.admin_secret
    environment = {
        **os.environ,
        "PYTHONPATH": str(HERE.parent.parent),
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "AGENCY_TEST_URL": url,
        "AGENCY_TEST_ADMIN_SECRET": api.settings.admin_secret,
        "AGENCY_TEST_TENANT": tenant.id,
        "AGENCY_TEST_KEY": tenant.key,
    }
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{url}/schema/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--generation-database",
        "none",
        "--request-timeout",
        "10",
        # One worker: CPython 3.11's parser is not thread-safe ("AST constructor recursion
        # depth mismatch" when two of hypothesis's threads parse source at once).
        "--workers",
        "1",
        "--no-color",
        "--max-failures",
        "50",
        "--report-dir",
        str(report),
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=environment,
        cwd=HERE.parent.parent,
    )
    try:
        async with asyncio.timeout(840):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return output.decode(errors="replace"), process.returncode
