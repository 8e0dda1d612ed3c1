"""deploy/k8s-proxy: the Kubernetes variant in which the producer's bootstrap.servers is the
sidecar proxy on localhost, added by deploy/components/proxy-sidecar. The overlay is rendered by
the real kustomize (`kubectl kustomize`), over the repository's base and over a base whose
Deployment carries an application's own variables, init containers and further containers, and
the result is checked: the producer, the sidecar's arguments and settings as the real CLI and
settings read them, that nothing of the application's is lost, and the Deployment against the
Kubernetes schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.cli.main import build_parser
from sidecar.config import load_settings
from tests.deploy.files import is_setting
from tests.deploy.kustomize import DEPLOY, deploy_copy, generated, pod_spec, render

VARIANT = DEPLOY / "k8s-proxy"
#: Fields of the base's relay container that the proxy's container holds equal (one image, one
#: set of resources and probe timings for both variants).
SHARED_FIELDS = ("image", "resources")
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def _by_name(containers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in containers}


def test_the_producer_talks_to_the_sidecar_proxy_on_localhost() -> None:
    resources = render(VARIANT)
    pod = pod_spec(resources, "orders-producer")
    (producer,) = pod["containers"]
    (sidecar,) = pod["initContainers"]
    assert producer["name"] == "producer" and sidecar["name"] == "zdict-sidecar"
    # A native sidecar: started (and ready) before the producer, stopped after it.
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["proxy"]
    assert build_parser().parse_args(sidecar["args"]).command == "proxy"
    env = {e["name"]: e["value"] for e in sidecar["env"] if "value" in e}
    config = generated(resources, "ConfigMap", "zdict-sidecar-config")
    assert [r["configMapRef"]["name"] for r in sidecar["envFrom"] if "configMapRef" in r] == [
        config["metadata"]["name"]
    ]
    settings_env = {**config["data"], **env}
    assert all(is_setting(name) for name in settings_env), settings_env
    settings = load_settings(
        proxy={
            "listen": settings_env["ZDICT_PROXY__LISTEN"],
            "topics": yaml.safe_load(settings_env["ZDICT_PROXY__TOPICS"]),
            "broker_port_base": settings_env["ZDICT_PROXY__BROKER_PORT_BASE"],
            "group_id": settings_env["ZDICT_PROXY__GROUP_ID"],
        }
    )
    (bootstrap,) = [e for e in producer["env"] if e["name"] == "KAFKA_BOOTSTRAP_SERVERS"]
    assert bootstrap == {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "127.0.0.1:9092"}
    assert settings.proxy.listen == "127.0.0.1:9092"
    assert settings.proxy.topics == ("orders",)
    # The application may produce to its topic (unset: the topics), and broker N is served
    # inside the pod at 9100+N.
    assert settings.proxy.allowed_topics == ()
    assert settings.proxy.broker_port_base == 9100
    # The producer starts once the proxy listens: its /readyz, not /healthz, gates the start.
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"


def test_the_proxy_container_keeps_the_base_containers_image_resources_and_security() -> None:
    """The component defines the proxy's container itself (a foreign pod has no relay container
    to move); what it shares with the base's relay container is held equal here."""
    base_pod = pod_spec(render(DEPLOY / "k8s"), "orders-producer")
    relay = _by_name(base_pod["containers"])["zdict-sidecar"]
    pod = pod_spec(render(VARIANT), "orders-producer")
    (sidecar,) = pod["initContainers"]
    for field in SHARED_FIELDS:
        assert sidecar[field] == relay[field], field
    pod_security = {k: base_pod["securityContext"][k] for k in ("runAsUser", "runAsGroup")}
    assert sidecar["securityContext"] == {**relay["securityContext"], **pod_security}
    for probe in PROBES:
        assert sidecar[probe]["httpGet"]["port"] == sidecar["ports"][0]["name"]
        timing = {k: v for k, v in sidecar[probe].items() if k != "httpGet"}
        assert timing == {k: v for k, v in relay[probe].items() if k != "httpGet"}, probe
    # Started means listening: the proxy's /readyz gates the start, not /healthz.
    assert [sidecar[p]["httpGet"]["path"] for p in PROBES] == ["/readyz", "/healthz", "/readyz"]
    assert [relay[p]["httpGet"]["path"] for p in PROBES[1:]] == ["/healthz", "/readyz"]
    assert [p["containerPort"] for p in sidecar["ports"]] == [
        p["containerPort"] for p in relay["ports"]
    ]
    relay_mounts = {m["mountPath"]: m.get("readOnly", False) for m in relay["volumeMounts"]}
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in sidecar["volumeMounts"]}
    assert mounts == relay_mounts
    # The relay's volumes left with it; the proxy's are its own.
    assert {v["name"] for v in pod["volumes"]} == {m["name"] for m in sidecar["volumeMounts"]}


def test_the_overlay_keeps_the_applications_variables_and_its_own_containers(
    tmp_path: Path,
) -> None:
    """was: a JSON patch replaced containers/0/env wholesale, set initContainers to [] and
    picked containers by position; over a real Deployment it wiped the application's settings
    and its own init containers (issue 28, point 5)."""
    deploy = deploy_copy(tmp_path)
    path = deploy / "k8s" / "deployment.yaml"
    deployment = yaml.safe_load(path.read_text())
    pod = deployment["spec"]["template"]["spec"]
    producer = _by_name(pod["containers"])["producer"]
    producer["env"].append({"name": "ORDERS_BATCH", "value": "500"})
    migrate = {"name": "migrate", "image": "registry.example.com/orders-migrate:1.0.0"}
    pod["initContainers"] = [migrate]
    exporter = {"name": "exporter", "image": "registry.example.com/exporter:2.0.0"}
    # The sidecar first, the producer last: positions are not what the overlay goes by.
    pod["containers"] = [_by_name(pod["containers"])["zdict-sidecar"], exporter, producer]
    path.write_text(yaml.safe_dump(deployment))

    rendered = pod_spec(render(deploy / "k8s-proxy"), "orders-producer")
    containers = _by_name(rendered["containers"])
    assert set(containers) == {"producer", "exporter"}
    assert containers["exporter"] == exporter
    env = {e["name"]: e for e in containers["producer"]["env"]}
    assert env["ORDERS_BATCH"] == {"name": "ORDERS_BATCH", "value": "500"}
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == {
        "name": "KAFKA_BOOTSTRAP_SERVERS",
        "value": "127.0.0.1:9092",
    }
    # The proxy first, so the application's own init containers can produce through it too.
    assert [c["name"] for c in rendered["initContainers"]] == ["zdict-sidecar", "migrate"]
    assert rendered["initContainers"][1] == migrate


def test_the_overlay_keeps_the_training_cronjob_retrain_now_creates_a_job_from() -> None:
    """was: the overlay deleted the CronJob (and its claim), so `kubectl create job
    --from=cronjob/orders-zdict-train` had nothing to start in the proxy variant (issue 40)."""
    base, proxy = render(DEPLOY / "k8s"), render(VARIANT)
    claim = ("PersistentVolumeClaim", "zdict-dictionaries")
    assert proxy[claim] == base[claim]
    # The base's CronJob as it is, but for the name of the settings' ConfigMap: the overlay's
    # settings (the proxy's topics and group) join the base's, so their hash differs.
    config = generated(proxy, "ConfigMap", "zdict-sidecar-config")["metadata"]["name"]
    base_config = generated(base, "ConfigMap", "zdict-sidecar-config")["metadata"]["name"]
    cronjob = yaml.safe_dump(proxy[("CronJob", "orders-zdict-train")])
    assert cronjob.replace(config, base_config) == yaml.safe_dump(
        base[("CronJob", "orders-zdict-train")]
    )
    (train,) = proxy[("CronJob", "orders-zdict-train")]["spec"]["jobTemplate"]["spec"]["template"][
        "spec"
    ]["containers"]
    assert {"configMapRef": {"name": config}} in train["envFrom"]
    args = build_parser().parse_args(train["args"])
    assert (args.command, args.configured_topics, args.publish) == ("train", True, True)
    readme = (DEPLOY / "README.md").read_text()
    assert "kubectl create job --from=cronjob/orders-zdict-train" in readme


@pytest.mark.parametrize("version", ["1.29.0", "1.37.0"])
def test_kubernetes_validate_accepts_the_rendered_deployment(version: str, tmp_path: Path) -> None:
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is not installed: `pip install -e '.[dev]'`"
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(yaml.safe_dump(render(VARIANT)[("Deployment", "orders-producer")]))
    result = subprocess.run(
        [tool, "--strict", "--kubernetes-version", version, str(deployment)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
