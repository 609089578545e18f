"""ops/k8s: every manifest validates against the Kubernetes schemas (offline, strict), and keeps the
rules a deployment depends on: one beat, never two at once; shared settings; unprivileged pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

K8S = REPO / "ops" / "k8s"
VERSION = "1.30"  # the oldest Kubernetes these manifests claim to work on (HPA v2, Ingress v1)


def documents() -> list[tuple[Path, dict[str, Any]]]:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    return [
        (K8S / name, doc) for name in listed for doc in yaml.safe_load_all((K8S / name).read_text()) if doc
    ]


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in documents() if d["kind"] == kind}


@pytest.mark.parametrize(("path", "doc"), documents(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_each_manifest_validates_against_the_kubernetes_schema(path: Path, doc: dict[str, Any]) -> None:
    """kubernetes-validate (schemas shipped in the package, no cluster) accepts it, unknown fields refused."""
    import kubernetes_validate

    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    """A misspelled field is refused: the check above is not vacuous."""
    import kubernetes_validate

    deployment = dict(by_kind("Deployment")["compactd-api"])
    deployment["spec"] = {**deployment["spec"], "replica": 3}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def test_exactly_one_beat_even_during_a_rollout() -> None:
    """Beat has one replica and the Recreate strategy (a rolling update would run two), and no autoscaler targets it."""
    beat = by_kind("Deployment")["compactd-beat"]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    targets = {h["spec"]["scaleTargetRef"]["name"] for h in by_kind("HorizontalPodAutoscaler").values()}
    assert "compactd-beat" not in targets


def test_every_process_shares_the_same_settings_and_runs_unprivileged() -> None:
    """API, worker and beat read the same ConfigMap and Secret (one redaction key, one database, one
    Redis) and run `compactd <role>` as a non-root user without privilege escalation."""
    for name, deployment in by_kind("Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["compactd", name.removeprefix("compactd-")]
        assert container["envFrom"] == [
            {"configMapRef": {"name": "compactd"}},
            {"secretRef": {"name": "compactd"}},
        ]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_api_service_and_ingress_reach_the_api_pods() -> None:
    """The Service selects the API pods' labels and the Ingress routes to that Service's port."""
    api = by_kind("Deployment")["compactd-api"]
    service = by_kind("Service")["compactd-api"]
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    backend = by_kind("Ingress")["compactd"]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == "compactd-api" and backend["port"]["name"] in {
        p["name"] for p in service["spec"]["ports"]
    }
