"""`docs/deploy.md` as an operator follows it: its one-container commands run against the
image, every values block renders with the chart into manifests the Kubernetes schemas
accept, and the image version it names is the package's. (The compose commands are the
ones `test_compose.py` runs; `helm install` and `podman push` need a cluster and a
registry this machine does not have.)"""

from __future__ import annotations

import re
import socket
import subprocess

import kubernetes_validate
import pytest
import yaml

from agency.contracts.version import package_version
from deploy.tests.conftest import ROOT, podman_env, sh
from deploy.tests.test_helm import KUBE, render

GUIDE = ROOT / "docs" / "deploy.md"


def blocks(language: str) -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def test_the_image_version_the_guide_names_is_the_packages() -> None:
    named = set(re.findall(r"agency:(\d+\.\d+\.\d+)", GUIDE.read_text(encoding="utf-8")))
    assert named == {package_version()}


@pytest.mark.parametrize("index", range(len(blocks("yaml"))))
def test_every_values_block_renders_manifests_the_schemas_accept(index: int) -> None:
    values = yaml.safe_load(blocks("yaml")[index])
    manifests = render(values)
    assert manifests
    for manifest in manifests:
        kubernetes_validate.validate(manifest, KUBE, strict=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(600)
def test_the_one_container_commands_start_agency_and_it_answers_readyz(
    image: str, container_name: str
) -> None:
    (block,) = [b for b in blocks("sh") if "podman run -d --name agency" in b]
    port = _free_port()
    volume = f"{container_name}-data"
    # As typed, on a free port and under this test's names, with the image just built.
    script = (
        block.replace("--name agency", f"--name {container_name}")
        .replace("127.0.0.1:8080:8080", f"127.0.0.1:{port}:8080")
        .replace("-v agency:", f"-v {volume}:")
        .replace(f"localhost/agency:{package_version()}", image)
        .replace("localhost:8080", f"127.0.0.1:{port}")
    )
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True, text=True, timeout=300, env=podman_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert '"ready"' in done.stdout  # /readyz's answer, printed by curl
    finally:
        sh("podman", "rm", "--force", "--time", "5", container_name, check=False, timeout=60)
        sh("podman", "volume", "rm", "--force", volume, check=False, timeout=60)
