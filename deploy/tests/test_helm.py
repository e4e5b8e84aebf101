"""The Helm chart: `helm lint --strict` finds nothing, and every value set renders manifests
that the Kubernetes schemas accept (helm-python-sdk renders offline, kubernetes-validate
checks against its bundled schemas), with the promised parts in them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from agency.services.threads.retention_policy import DAY, RetentionSettings

CHART = Path(__file__).resolve().parents[1] / "helm" / "agency"
KUBE = "1.30.0"
SERVICES = (
    "api", "registry", "runtime", "tools", "subagents", "workflows", "projector", "gateway",
    "webhooks",
)  # fmt: skip

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external": {
        "nats": {"bundled": False, "external": {"existingSecret": "agency-nats"}},
        "postgresql": {"bundled": False, "external": {"existingSecret": "agency-db"}},
        "secrets": {"existingSecret": "agency-secrets"},
        "models": {"existingSecret": "agency-models", "fakeModel": False},
    },
    "scaled": {
        "image": {"repository": "registry.example/agency", "tag": "0.2.0"},
        "services": {"runtime": {"replicas": 6}, "api": {"replicas": 3}, "tools": {"replicas": 1}},
        "nats": {"replicas": 5, "streamReplicas": 3, "storageClassName": "fast"},
        "podDisruptionBudget": {"maxUnavailable": 2},
        "env": {"AGENCY_TENANT_MAX_ACTIVE_RUNS": "500"},
    },
    "no-pdb": {"podDisruptionBudget": {"enabled": False}, "models": {"fakeModel": False}},
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(CHART)
    manifests = chart.render(values, name="agency", namespace="agents", revision=1, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in manifests.items():
        if not path.endswith((".yaml", ".yml")):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_chart_lints_strictly(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, namespace="agents", kube_version=f"v{KUBE}")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report.get("errors", [])
    assert not problems, problems


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_manifest_is_valid_kubernetes(values: dict[str, Any]) -> None:
    docs = render(values)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE, strict=True)


def test_each_service_is_a_deployment_with_its_replicas_probes_and_resources() -> None:
    docs = render(VALUE_SETS["scaled"])
    deployments = by_kind(docs, "Deployment")
    for service in SERVICES:
        spec = deployments[f"agency-{service}"]["spec"]
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == "registry.example/agency:0.2.0"
        assert container["args"][:2] == ["serve", service]
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert "livenessProbe" in container
        assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert deployments["agency-runtime"]["spec"]["replicas"] == 6
    api = deployments["agency-api"]["spec"]["template"]["spec"]["containers"][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # A budget for each service run in more than one copy, and for the NATS cluster.
    budgets = by_kind(docs, "PodDisruptionBudget")
    assert set(budgets) == {"agency-runtime", "agency-api", "agency-nats"}
    assert budgets["agency-runtime"]["spec"]["maxUnavailable"] == 2
    assert by_kind(docs, "StatefulSet")["agency-nats"]["spec"]["replicas"] == 5


def test_credentials_come_from_secrets_and_none_is_written_in_a_pod() -> None:
    for values in VALUE_SETS.values():
        docs = render(values)
        for kind in ("Deployment", "StatefulSet", "Job"):
            for doc in by_kind(docs, kind).values():
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    env = {e["name"]: e for e in container.get("env", [])}
                    for name in (
                        "AGENCY_ADMIN_SECRET",
                        "AGENCY_VARIABLES_KEY",
                        "AGENCY_OPERATOR_KEY",
                        "NATS_PASSWORD",
                        "POSTGRES_PASSWORD",
                    ):
                        if name in env:
                            assert "secretKeyRef" in env[name]["valueFrom"], (
                                doc["metadata"]["name"],
                                name,
                            )
                    if "NATS_URL" in env and "value" in env["NATS_URL"]:
                        assert "$(NATS_PASSWORD)" in env["NATS_URL"]["value"]
    external = render(VALUE_SETS["external"])
    assert not by_kind(external, "Secret")
    assert not by_kind(external, "StatefulSet")
    api = by_kind(external, "Deployment")["agency-api"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in api["env"]}
    assert env["NATS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "agency-nats",
        "key": "nats-url",
    }
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "agency-db",
        "key": "database-url",
    }
    assert env["AGENCY_ADMIN_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "agency-secrets"
    assert api["envFrom"] == [{"secretRef": {"name": "agency-models"}}]


def test_the_migration_job_runs_after_every_install_and_upgrade() -> None:
    (job,) = by_kind(render({}), "Job").values()
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    env = {e["name"]: e for e in container["env"]}
    assert env["AGENCY_STREAM_REPLICAS"]["value"] == "3"


def test_retention_reaches_every_service_in_a_form_the_services_read() -> None:
    default = retention_env(render({}))
    assert RetentionSettings.from_env_values(default) == RetentionSettings()
    chosen = retention_env(
        render({"retention": {"days": "30", "maxDays": "90", "sweepSeconds": 60}})
    )
    settings = RetentionSettings.from_env_values(chosen)
    assert (settings.default_seconds, settings.max_seconds, settings.sweep_seconds) == (
        30 * DAY, 90 * DAY, 60.0,
    )  # fmt: skip


def retention_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The retention variables, the same on every service's container."""
    seen: list[dict[str, str]] = []
    for name, deployment in by_kind(docs, "Deployment").items():
        if name.removeprefix("agency-") not in SERVICES:
            continue  # the offline model
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
            seen.append({k: v for k, v in env.items() if k.startswith("AGENCY_RETENTION_")})
    assert len(seen) == len(SERVICES) and all(s == seen[0] for s in seen), seen
    return seen[0]


def test_external_services_without_their_secret_are_refused() -> None:
    with pytest.raises(helm.HelmError, match=re.escape("nats.external.existingSecret is required")):
        render({"nats": {"bundled": False}})
