"""The deployment's tests: the real image built and run with podman, the compose file
brought up with podman-compose, the Helm chart rendered and validated. Run by
`just test-deploy`, outside the suite's `tests/` (they take minutes)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PODMAN_CONF = ROOT / "deploy" / "podman" / "containers.conf"
T = TypeVar("T")


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(PODMAN_CONF))}


def sh(*argv: str, timeout: float = 120, check: bool = True, **kw: object) -> str:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=podman_env(),
        **kw,  # type: ignore[arg-type]
    )
    if check:
        assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def container_logs(name: str, tail: int = 400) -> str:
    """The last `tail` lines a container wrote, stdout and stderr interleaved (`podman
    logs` replays the container's stderr on its own)."""
    done = subprocess.run(
        ["podman", "logs", "--tail", str(tail), name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        env=podman_env(),
    )
    return done.stdout


def eventually(check: Callable[[], T], timeout: float, every: float = 0.5) -> T:
    """`check()`'s value once it stops raising, or its last error after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, httpx.HTTPError) as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout} s: {e!r}") from e
        time.sleep(every)


@pytest.fixture(scope="session")
def image() -> str:
    """Agency's image: $AGENCY_IMAGE as given, else built by `deploy/image/build.sh`."""
    if given := os.environ.get("AGENCY_IMAGE"):
        return given
    out = sh("nice", "-n", "19", str(ROOT / "deploy" / "image" / "build.sh"), timeout=1800)
    return out.strip().splitlines()[-1]


def run_demo_thread(http: httpx.Client, admin_secret: str, message: str = "hello") -> None:
    """A tenant made with the admin secret, an agency, a thread of the default system's
    `assistant` invoked against the offline model, until its run completes."""
    r = http.post(
        "/tenants", json={"name": "ship"}, headers={"Authorization": f"Bearer {admin_secret}"}
    )
    assert r.status_code in (201, 202), r.text  # 202: stored, read models behind
    auth = {"Authorization": f"Bearer {r.json()['apiKey']}"}
    r = http.post("/agencies", json={"name": "demo"}, headers=auth)
    assert r.status_code in (201, 202), r.text  # 202: stored, read models behind
    agency = r.json()["id"]
    r = http.post(f"/agency/{agency}/agents", json={"agentType": "assistant"}, headers=auth)
    assert r.status_code in (201, 202), r.text  # 202: stored, read models behind
    thread = r.json()["id"]
    body = {"messages": [{"role": "user", "content": message}]}
    r = http.post(f"/agency/{agency}/agent/{thread}/invoke", json=body, headers=auth)
    assert r.status_code == 202, r.text

    def completed() -> None:
        r = http.get(f"/agency/{agency}/agent/{thread}/state", headers=auth)
        assert r.status_code == 200, r.text
        assert r.json()["run"]["status"] == "completed", r.json()["run"]

    eventually(completed, timeout=120)


@pytest.fixture
def container_name(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"agency-test-{os.getpid()}-{request.node.name[:30].replace('_', '-')}"
    yield name
    sh("podman", "rm", "--force", "--volumes", "--time", "5", name, check=False, timeout=60)
