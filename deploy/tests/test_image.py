"""The image as an operator runs it: `agency up` in one container answers /readyz, runs a
thread from the host over HTTP, runs as a non-root user, keeps no secret, and drains on
SIGTERM within a bound."""

from __future__ import annotations

import json
import secrets
import socket
import time

import httpx
import pytest

from deploy.tests.conftest import eventually, run_demo_thread, sh

pytestmark = pytest.mark.timeout(2400)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_image_keeps_no_secret_and_runs_as_a_user(image: str) -> None:
    (info,) = json.loads(sh("podman", "image", "inspect", image))
    config = info["Config"]
    assert config["User"] == "10001:10001"
    names = [e.split("=", 1)[0] for e in config.get("Env", [])]
    assert not [n for n in names if any(w in n for w in ("SECRET", "KEY", "PASSWORD", "TOKEN"))]
    assert config["Entrypoint"][:2] == ["/usr/bin/tini", "--"]
    # Nothing in the data directory: each container makes its own keys and passwords.
    listed = sh("podman", "run", "--rm", "--entrypoint", "ls", image, "-A", "/var/lib/agency")
    assert listed.strip() == ""
    # Every service is runnable from it.
    helped = sh("podman", "run", "--rm", image, "serve", "--help")
    services = ("registry", "runtime", "tools", "subagents", "workflows", "projector", "webhooks")
    for service in (*services, "api"):
        assert service in helped


def test_agency_up_in_one_container_runs_a_thread_and_drains_on_sigterm(
    image: str, container_name: str
) -> None:
    port, secret = free_port(), secrets.token_urlsafe(24)
    sh(
        "podman", "run", "--detach", "--name", container_name,
        "--publish", f"127.0.0.1:{port}:8080",
        "--env", f"AGENCY_ADMIN_SECRET={secret}",
        image,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=10) as http:

        def ready() -> None:
            assert http.get("/readyz").status_code == 200

        eventually(ready, timeout=240, every=1)
        assert sh("podman", "exec", container_name, "id", "-u").strip() == "10001"
        run_demo_thread(http, secret)

        def healthy() -> None:
            state = json.loads(sh("podman", "inspect", container_name))[0]["State"]
            health = state.get("Health") or state.get("Healthcheck") or {}
            assert health.get("Status") == "healthy", health

        sh("podman", "healthcheck", "run", container_name)
        eventually(healthy, timeout=60, every=1)

    started = time.monotonic()
    sh("podman", "stop", "--time", "60", container_name, timeout=90)
    took = time.monotonic() - started
    state = json.loads(sh("podman", "inspect", container_name))[0]["State"]
    assert state["ExitCode"] == 0, state
    assert took < 45, f"took {took:.1f} s to stop"
