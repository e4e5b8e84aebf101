"""The compose file as an operator brings it up with podman-compose: a 3-node NATS
cluster, PostgreSQL, the migration job and each service in its own container (2 runtime
workers). Threads with tools, with subagents and with an approval run through the API
while a NATS node and a runtime container are killed; every run ends, once."""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.tests.conftest import ROOT, container_logs, eventually, podman_env, sh

pytestmark = pytest.mark.timeout(2700)
COMPOSE = ROOT / "deploy" / "compose.yaml"
TERMINAL = ("run.completed", "run.error", "run.canceled")
BLUEPRINTS = (
    {
        "name": "researcher",
        "description": "Researches one part of a question.",
        "prompt": "You research the part you are given and report briefly.",
        "tags": ["default"],
    },
    {
        "name": "lead",
        "description": "Splits work between researchers and merges their reports.",
        "prompt": "You split the work between researchers with `task`, then merge their reports.",
        "tags": ["default"],
        "config": {"subagents": {"subagents": ["researcher"]}},
    },
    {
        "name": "careful",
        "description": "Plans only once a person approves.",
        "prompt": "Plan, then answer.",
        "tags": ["default"],
        "config": {"hitl": {"tools": ["write_todos"]}},
    },
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def compose_cmd(project: str) -> list[str]:
    return [sys.executable, "-m", "podman_compose", "-p", project, "-f", str(COMPOSE)]


@pytest.fixture(scope="module")
def system(image: str) -> Iterator[tuple[str, str, str]]:
    """The compose project up: (project, API URL, admin secret)."""
    project = f"agencyt{os.getpid()}"
    port = free_port()
    admin = secrets.token_urlsafe(24)
    env = {
        **podman_env(),
        "AGENCY_IMAGE": image,
        "AGENCY_API_PORT": str(port),
        "AGENCY_ADMIN_SECRET": admin,
        "AGENCY_VARIABLES_KEY": secrets.token_urlsafe(32),
        "AGENCY_OPERATOR_KEY": secrets.token_urlsafe(32),
        "NATS_PASSWORD": secrets.token_urlsafe(16),
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
    }
    up = [*compose_cmd(project), "up", "-d"]
    done = subprocess_run(up, env, timeout=900)
    try:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        yield project, f"http://127.0.0.1:{port}", admin
    finally:
        logs = Path(os.environ.get("AGENCY_DEPLOY_LOGS", "/tmp")) / f"{project}.log"
        with logs.open("w") as out:
            for line in sh("podman", "ps", "-a", "--format", "{{.Names}}", check=False).split():
                if line.startswith(project):
                    out.write(f"=== {line}\n")
                    out.write(container_logs(line))
                    # with its anonymous volume (the image's data directory)
                    sh("podman", "rm", "--force", "--volumes", "--time", "10", line, check=False)
        subprocess_run([*compose_cmd(project), "down", "-v", "-t", "10"], env, timeout=600)


def subprocess_run(argv: list[str], env: dict[str, str], timeout: float):  # type: ignore[no-untyped-def]
    import subprocess

    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def container(project: str, service: str) -> str:
    names = sh("podman", "ps", "--format", "{{.Names}}").split()
    (name,) = [
        n for n in names if n.startswith(f"{project}_{service}_") or n == f"{project}-{service}-1"
    ]
    return name


def test_runs_with_tools_subagents_and_approvals_end_once_through_node_and_worker_kills(
    system: tuple[str, str, str],
) -> None:
    project, api, admin = system
    with httpx.Client(base_url=api, timeout=30) as http:

        def ready() -> None:
            assert http.get("/readyz").status_code == 200

        eventually(ready, timeout=300, every=2)

        def post(path: str, body: dict[str, object], auth: dict[str, str]) -> httpx.Response:
            """POST, again while the API answers 503 (the event store did not answer in
            time, as while a NATS node is lost or a fresh cluster settles): the client's
            part, as documented."""

            def answered() -> httpx.Response:
                r = http.post(path, json=body, headers=auth)
                assert r.status_code != 503, r.text
                return r

            return eventually(answered, timeout=60, every=1)

        r = post("/tenants", {"name": "compose"}, {"Authorization": f"Bearer {admin}"})
        assert r.status_code in (201, 202), r.text  # 202: stored, read models behind
        auth = {"Authorization": f"Bearer {r.json()['apiKey']}"}
        r = post("/agencies", {"name": "compose"}, auth)
        assert r.status_code in (201, 202), r.text  # 202: stored, read models behind
        agency = r.json()["id"]
        for blueprint in BLUEPRINTS:
            r = post(f"/agency/{agency}/blueprints", blueprint, auth)
            assert r.status_code in (200, 201), r.text

        def start(agent_type: str, message: str) -> str:
            r = post(f"/agency/{agency}/agents", {"agentType": agent_type}, auth)
            assert r.status_code in (201, 202), r.text  # 202: stored, read models behind
            thread = r.json()["id"]
            # One idempotency key: an invoke sent again after a 503 is one run.
            body = {"messages": [{"role": "user", "content": message}], "idempotencyKey": thread}
            r = post(f"/agency/{agency}/agent/{thread}/invoke", body, auth)
            assert r.status_code == 202, r.text
            return str(thread)

        threads = {
            start("assistant", "Plan a trip and keep notes in a file."): "completed",
            start("lead", "Compare two cities."): "completed",
            start("careful", "Plan a picnic."): "paused",
        }
        # A NATS node and a runtime worker die while the runs go on.
        sh("podman", "kill", container(project, "nats-2"))
        sh("podman", "kill", container(project, "runtime-1"))
        threads |= {
            start("assistant", "Plan a second trip and keep notes."): "completed",
            start("lead", "Compare two more cities."): "completed",
            start("careful", "Plan a second picnic."): "paused",
        }

        def status(thread: str) -> str:
            r = http.get(f"/agency/{agency}/agent/{thread}/state", headers=auth)
            assert r.status_code == 200, r.text
            return str(r.json()["run"]["status"])

        def story(thread: str) -> str:
            """The events of a thread's tree, a line each: what a failure shows."""
            r = http.get(
                f"/agency/{agency}/agent/{thread}/events",
                params={"correlationId": thread, "limit": 1000},
                headers=auth,
            )
            return "\n".join(
                f"{e['threadId']} {e['type']} {e['ts']}" for e in r.json().get("events", [])
            )

        for thread, expected in threads.items():

            def reached(thread: str = thread, expected: str = expected) -> None:
                now = status(thread)
                assert now == expected, f"{thread} is {now}, not {expected}:\n{story(thread)}"

            eventually(reached, timeout=240, every=1)
            if expected == "paused":
                r = http.post(
                    f"/agency/{agency}/agent/{thread}/approve",
                    json={"approved": True},
                    headers=auth,
                )
                assert r.status_code == 202, r.text

                def completed(thread: str = thread) -> None:
                    assert status(thread) == "completed"

                eventually(completed, timeout=240, every=1)

        for thread in threads:
            r = http.get(
                f"/agency/{agency}/agent/{thread}/events",
                params={"correlationId": thread, "limit": 1000, "type": ",".join(TERMINAL)},
                headers=auth,
            )
            assert r.status_code == 200, r.text
            ends = [(e["threadId"], e["runId"]) for e in r.json()["events"]]
            assert ends and len(ends) == len(set(ends)), json.dumps(r.json())[:3000]
            assert {e["type"] for e in r.json()["events"]} == {"run.completed"}
        # The lead's threads ran subagents.
        leads = [t for t in threads if threads[t] == "completed"]
        trees = [
            http.get(
                f"/agency/{agency}/agent/{t}/events",
                params={"correlationId": t, "limit": 1000, "type": "subagent.spawned"},
                headers=auth,
            ).json()["events"]
            for t in leads
        ]
        assert any(trees), "no subagent was spawned"
