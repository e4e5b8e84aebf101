"""The OpenAPI document tells the truth: schemathesis, every check, every phase, against the
system as a user starts it.

`agency up` runs in a process of its own (NATS, PostgreSQL, every service, the API and
the offline fake model, in a temporary data directory); schemathesis's CLI then generates
valid and invalid requests for every operation of `/schema/openapi.json` and checks each
answer: no server error, every status code and body documented and matching its schema,
invalid input refused, valid input accepted, `Allow` on 405, auth enforced. All its phases
run (examples, coverage, fuzzing, stateful) with its default settings and the seed fixed
(the run is the same each time). In the suite the number of examples is bounded
(`MAX_EXAMPLES`, the same for every phase) to keep the run within a few minutes on two
cores; `just schemathesis` (`AGENCY_SCHEMATHESIS_FULL=1`) runs it with schemathesis's own
default instead, which takes far longer. The hooks (`schemathesis_hooks.py`) only
authenticate: every case is sent as generated. The run may delete what it made (a thread,
an agency with its threads, an end user's threads), and a thread deleted answers 410 Gone
from then on wherever it is named: the document says so of those routes, and the run's
configuration (`checks_config`) accepts a 410 from exactly the operations that document
it, as a valid request's answer; every other check and operation is as schemathesis has
it. Two routes are not in the document: the
WebSocket (OpenAPI cannot describe one; tests/api/test_streams.py holds it to its
contract) and `/mcp`, which speaks MCP (tests/mcp).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from agency.infra.endpoints import Endpoints, EndpointsNotFound, read_endpoints
from tests.helpers import assert_eventually

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
BIN = Path(sys.executable).parent
MAX_EXAMPLES = 10
SEED = 1
# schemathesis's defaults whole (`just schemathesis`), rather than MAX_EXAMPLES.
FULL = os.environ.get("AGENCY_SCHEMATHESIS_FULL") == "1"
RUN_SECONDS = 3 * 3600 if FULL else 840
# What schemathesis takes as a valid request's answer (its default for the
# `positive_data_acceptance` check), and 410 where the operation documents it.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
GONE = "410"


def checks_config(document: dict[str, object]) -> str:
    """schemathesis.toml: each operation whose responses document 410 Gone accepts it."""
    entries = []
    paths = document["paths"]
    assert isinstance(paths, dict)
    for path, operations in sorted(paths.items()):
        for method, operation in sorted(operations.items()):
            if not isinstance(operation, dict) or GONE not in operation.get("responses", {}):
                continue
            statuses = json.dumps(sorted([*ACCEPTED, GONE]))
            entries.append(
                "[[operations]]\n"
                f"include-name = {json.dumps(f'{method.upper()} {path}')}\n"
                f"checks.positive_data_acceptance.expected-statuses = {statuses}\n"
            )
    assert entries, "no operation documents 410"
    return "\n".join(entries)


@pytest.mark.timeout(RUN_SECONDS + 60)
async def test_schemathesis_finds_no_failure(tmp_path: Path) -> None:
    data = tmp_path / "agency"
    # The offline fake model, as on a machine without a model provider's key.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    # What the system logged (its warnings and errors are shown with a failure).
    log_path = tmp_path / "agency-up.log"
    with log_path.open("wb") as log:
        up = await asyncio.create_subprocess_exec(
            str(BIN / "agency"), "up", "--data-dir", str(data), "--port", "0",
            stdout=asyncio.subprocess.DEVNULL, stderr=log,
            env=environment, cwd=ROOT,
        )  # fmt: skip
    try:

        async def ready() -> Endpoints:
            assert up.returncode is None, f"agency up exited with {up.returncode}"
            try:
                endpoints = read_endpoints(data)
            except EndpointsNotFound as e:
                raise AssertionError(str(e)) from e
            assert endpoints.api_url and endpoints.api_key and endpoints.admin_secret
            return endpoints

        endpoints = await assert_eventually(ready, timeout=90)
        async with httpx.AsyncClient(timeout=30) as http:
            document = (await http.get(f"{endpoints.api_url}/schema/openapi.json")).json()
        config = tmp_path / "schemathesis.toml"
        config.write_text(checks_config(document))
        text, code = await _schemathesis(endpoints, tmp_path / "report", config, environment)
    finally:
        if up.returncode is None:
            up.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(up.wait(), timeout=60)
            except TimeoutError:
                up.kill()
                await up.wait()
    assert code == 0, f"{text}\n{_troubles(log_path)}"
    assert "No issues found" in text or "passed" in text, text
    # No input, however malformed, took a service down (each restarts, but it is a bug).
    crashes = [
        line for line in _troubles(log_path).splitlines() if "service failed, restarting" in line
    ]
    assert crashes == [], "\n".join(crashes)


def _troubles(log_path: Path) -> str:
    """The system's warnings and errors, from its log (undecodable events of deleted
    threads, which the run makes, left out)."""
    lines = log_path.read_text(errors="replace").splitlines()
    troubles = [
        line[:2000]
        for line in lines
        if ('"level": "warning"' in line or '"level": "error"' in line)
        and "undecodable event skipped" not in line
    ]
    return "the system's warnings and errors:\n" + "\n".join(troubles[-100:])


async def _schemathesis(
    endpoints: Endpoints, report: Path, config: Path, environment: dict[str, str]
) -> tuple[str, int]:
    assert endpoints.api_url and endpoints.admin_secret and endpoints.api_key
    process = await asyncio.create_subprocess_exec(
        str(BIN / "st"),
        "--config-file", str(config),
        "run",
        f"{endpoints.api_url}/schema/openapi.json",
        "--checks", "all",
        "--phases", "examples,coverage,fuzzing,stateful",
        *([] if FULL else ["--max-examples", str(MAX_EXAMPLES)]),
        "--seed", str(SEED),
        # One worker, schemathesis's default, said outright: CPython 3.11's parser is not
        # thread-safe ("AST constructor recursion depth mismatch" when two threads parse).
        "--workers", "1",
        "--no-color",
        "--report-dir", str(report),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={
            **environment,
            "PYTHONPATH": str(ROOT),
            "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
            "AGENCY_TEST_URL": endpoints.api_url,
            "AGENCY_TEST_ADMIN_SECRET": endpoints.admin_secret,
            "AGENCY_TEST_TENANT": endpoints.tenant_id or "default",
            "AGENCY_TEST_KEY": endpoints.api_key,
        },
        cwd=report.parent,
    )  # fmt: skip
    try:
        async with asyncio.timeout(RUN_SECONDS):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return output.decode(errors="replace"), process.returncode
