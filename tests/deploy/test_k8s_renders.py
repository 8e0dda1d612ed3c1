"""deploy/k8s and deploy/k8s-proxy as `kubectl apply -k` applies them, rendered by the real
kustomize: what an operator expects of every pod both variants run (issue 28): the metrics port
the Service targets and the probes ask, one worker per container, no ServiceAccount token, the
brokers' CA mounted where the settings point, a disruption budget and a spread over nodes, and
the optional NetworkPolicy component."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.config import RegistrySettings
from sidecar.dictionaries.registry_state import INDEX_SUFFIX
from sidecar.dictionaries.registry_topics import TOPIC_CONFIG
from tests.deploy.kustomize import (
    DEPLOY,
    KUSTOMIZATIONS,
    deploy_copy,
    generated,
    pod_spec,
    render,
)

POD_LABELS = {"app.kubernetes.io/name": "orders-producer"}


@pytest.fixture(scope="module", params=KUSTOMIZATIONS)
def rendered(request: pytest.FixtureRequest) -> dict[tuple[str, str], dict[str, Any]]:
    return render(DEPLOY / request.param)


def _pods(resources: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    pods = [pod_spec(resources, name) for kind, name in resources if kind == "Deployment"]
    pods += [
        r["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        for (kind, _), r in resources.items()
        if kind == "CronJob"
    ]
    return pods


def _zdict_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    return [c for c in containers if "zdict-sidecar" in c["image"]]


def _sidecar(resources: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (sidecar,) = _zdict_containers(pod_spec(resources, "orders-producer"))
    return sidecar


def test_the_service_targets_the_sidecars_metrics_port_by_number(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """was: `targetPort: metrics`, a name that only an init container (the proxy's native
    sidecar) declares: Endpoints resolve that only on recent Kubernetes versions, and on the
    others the ServiceMonitor finds no target (issue 28, point 1)."""
    (port,) = rendered[("Service", "orders-producer-zdict-metrics")]["spec"]["ports"]
    sidecar = _sidecar(rendered)
    (declared,) = sidecar["ports"]
    assert isinstance(port["targetPort"], int)
    assert port["targetPort"] == declared["containerPort"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert sidecar[probe]["httpGet"]["port"] in (declared["name"], declared["containerPort"])


def test_each_zdict_container_runs_one_worker_on_the_one_port_the_service_knows(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """`--workers N` puts worker i's metrics on port + i, which neither the Service nor the
    probes know: in Kubernetes, scale with replicas (issue 28, point 8)."""
    config = generated(rendered, "ConfigMap", "zdict-sidecar-config")["data"]
    assert config.get("ZDICT_RELAY__WORKERS", "1") == "1"
    for pod in _pods(rendered):
        for container in _zdict_containers(pod):
            assert "--workers" not in container.get("args", []), container["name"]
            names = {e["name"] for e in container.get("env", [])}
            assert "ZDICT_RELAY__WORKERS" not in names and "ZDICT_METRICS__PORT" not in names
    assert config["ZDICT_METRICS__PORT"] == str(_sidecar(rendered)["ports"][0]["containerPort"])


def test_no_pod_mounts_a_service_account_token(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    pods = _pods(rendered)
    assert pods
    for pod in pods:
        assert pod["automountServiceAccountToken"] is False


def test_the_brokers_ca_is_mounted_where_the_tls_settings_point(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """was: SASL_SSL without a CA: a private CA failed the handshake on the first apply."""
    config = generated(rendered, "ConfigMap", "zdict-sidecar-config")["data"]
    assert config["ZDICT_KAFKA__SECURITY_PROTOCOL"] == "SASL_SSL"
    ca = Path(config["ZDICT_KAFKA__SSL_CA_LOCATION"])
    for pod in _pods(rendered):
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in _zdict_containers(pod):
            (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == ca.parent]
            assert mount["readOnly"] is True
            source = volumes[mount["name"]]["configMap"]
            assert source["name"] == "zdict-sidecar-kafka-ca"
            assert source.get("optional") is not True  # a missing CA stops the pod, visibly


def test_a_drain_takes_one_pod_at_a_time_and_replicas_spread_over_nodes(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = rendered[("Deployment", "orders-producer")]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    budget = rendered[("PodDisruptionBudget", "orders-producer")]["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1 < deployment["spec"]["replicas"]
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    for constraint in spread:
        assert constraint["labelSelector"]["matchLabels"].items() <= labels.items()
        # A preference: a one-node cluster still schedules every replica.
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"


@pytest.mark.parametrize("variant", KUSTOMIZATIONS)
def test_the_network_policy_component_admits_prometheus_on_the_metrics_port_only(
    variant: str, tmp_path: Path
) -> None:
    deploy_copy(tmp_path)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"../deploy/{variant}"],
                "components": ["../deploy/components/metrics-network-policy"],
            }
        )
    )
    resources = render(overlay)
    policy = resources[("NetworkPolicy", "orders-producer-zdict-metrics")]["spec"]
    pod_labels = resources[("Deployment", "orders-producer")]["spec"]["template"]["metadata"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels["labels"].items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    (port,) = rule["ports"]
    service = resources[("Service", "orders-producer-zdict-metrics")]["spec"]["ports"][0]
    assert port == {"port": service["targetPort"], "protocol": "TCP"}


def test_kubernetes_validate_accepts_the_network_policy_and_the_budget() -> None:
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is not installed: `pip install -e '.[dev]'`"
    files = [
        DEPLOY / "components" / "metrics-network-policy" / "networkpolicy.yaml",
        DEPLOY / "k8s" / "pdb.yaml",
    ]
    for version in ("1.29.0", "1.37.0"):
        result = subprocess.run(
            [tool, "--strict", "--kubernetes-version", version, *map(str, files)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_changed_setting_rolls_the_pods(tmp_path: Path) -> None:
    """was: a plain ConfigMap: a changed setting reached no pod until something else restarted
    it. Generated, its name carries a hash of the content, written into the pod template."""
    deploy = deploy_copy(tmp_path)
    before = render(deploy / "k8s")
    env = deploy / "k8s" / "zdict-sidecar.env"
    env.write_text(env.read_text().replace("ZDICT_LOG_FORMAT=json", "ZDICT_LOG_FORMAT=console"))
    after = render(deploy / "k8s")
    names = [
        generated(r, "ConfigMap", "zdict-sidecar-config")["metadata"]["name"]
        for r in (before, after)
    ]
    assert names[0] != names[1]
    for resources, name in zip((before, after), names, strict=True):
        text = yaml.safe_dump(resources[("Deployment", "orders-producer")])
        assert f"name: {name}" in text and "name: zdict-sidecar-config\n" not in text


def test_the_image_is_named_in_one_place() -> None:
    """was: the image and its tag in deployment.yaml and cronjob-train.yaml both."""
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    wanted = f"{image['newName']}:{image['newTag']}"
    for variant in KUSTOMIZATIONS:
        for pod in _pods(render(DEPLOY / variant)):
            for container in _zdict_containers(pod):
                assert container["image"] == wanted, (variant, container["name"])
    mentions = [
        path.relative_to(DEPLOY)
        for path in DEPLOY.glob("k8s*/*.yaml")
        if image["newName"] in path.read_text()
    ]
    assert mentions == [Path("k8s/kustomization.yaml")]


def test_the_registry_topic_component_declares_the_topic_the_sidecars_use_replicated() -> None:
    """was: the registry topic, the only source of truth for dictionaries, was left to the first
    sidecar to create with the broker's default replication and no min.insync.replicas."""
    resources = render(DEPLOY / "components" / "strimzi-registry-topic")
    assert {kind for kind, _ in resources} == {"KafkaTopic"}
    registry = RegistrySettings().topic
    specs = {topic["spec"]["topicName"]: topic["spec"] for topic in resources.values()}
    assert set(specs) == {registry, registry + INDEX_SUFFIX}
    for spec in specs.values():
        assert spec["partitions"] == 1 and spec["replicas"] == 3
        assert int(spec["config"]["min.insync.replicas"]) == 2 < spec["replicas"]
        # What the sidecar would create, and more: nothing of TOPIC_CONFIG is left out.
        assert TOPIC_CONFIG.items() <= spec["config"].items()


def test_the_dashboard_ships_as_a_configmap_grafana_loads_with_the_committed_json(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """kube-prometheus-stack's Grafana loads the ConfigMaps labelled grafana_dashboard: "1"."""
    configmap = rendered[("ConfigMap", "zdict-sidecar-dashboard")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = DEPLOY / "grafana" / "dashboards" / "zdict-sidecar.json"
    assert configmap["data"] == {"zdict-sidecar.json": dashboard.read_text()}


def _topic_settings(resources: dict[tuple[str, str], dict[str, Any]]) -> dict[str, str]:
    """What names the topic in a render: the settings that carry it. The CronJob names none: it
    trains the topics the settings name (`train --configured-topics`)."""
    data: dict[str, str] = generated(resources, "ConfigMap", "zdict-sidecar-config")["data"]
    named = {key: value for key, value in data.items() if "TOPICS" in key or "GROUP_ID" in key}
    (cronjob,) = [r for (kind, _), r in resources.items() if kind == "CronJob"]
    (train,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert "--configured-topics" in train["args"] and "--topic" not in train["args"]
    return named


def test_the_topic_is_written_once_and_names_the_groups_and_the_cronjobs_run(
    tmp_path: Path,
) -> None:
    """was: `orders` in zdict-sidecar.env, the CronJob's arguments and the proxy overlay's
    topics and group (issue 40). Now the env file's ZDICT_RELAY__INPUT_TOPICS is the one place:
    another topic there reaches every setting (which the CronJob trains) in both overlays, and
    rolls the pods."""
    assert _topic_settings(render(DEPLOY / "k8s")) == {
        "ZDICT_RELAY__INPUT_TOPICS": '["orders"]',
        "ZDICT_RELAY__GROUP_ID": "orders-zdict-sidecar",
    }
    deploy = deploy_copy(tmp_path)
    env = deploy / "k8s" / "zdict-sidecar.env"
    env.write_text(env.read_text().replace('["orders"]', '["shop-payments"]'))
    relay = _topic_settings(render(deploy / "k8s"))
    assert relay == {
        "ZDICT_RELAY__INPUT_TOPICS": '["shop-payments"]',
        "ZDICT_RELAY__GROUP_ID": "shop-payments-zdict-sidecar",
    }
    proxy = _topic_settings(render(deploy / "k8s-proxy"))
    assert proxy == relay | {
        "ZDICT_PROXY__TOPICS": '["shop-payments"]',
        "ZDICT_PROXY__GROUP_ID": "shop-payments-zdict-proxy",
    }
    for variant in KUSTOMIZATIONS:
        for path in (deploy / variant).iterdir():
            written = [
                line
                for line in path.read_text().splitlines()
                if "orders" in line and not line.lstrip().startswith("#")
            ]
            # The application's own names (orders-producer, its CronJob) are not the topic.
            assert all("orders-producer" in w or "orders-zdict-train" in w for w in written), (
                path,
                written,
            )
