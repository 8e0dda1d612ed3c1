"""deploy/k8s-proxy: the Kubernetes variant in which the producer's bootstrap.servers is the
sidecar proxy on localhost. The overlay is rendered by the real kustomize (`kubectl kustomize`),
over the repository's base and over a base whose Deployment carries an application's own
variables, init containers and further containers, and the result is checked: the producer, the
sidecar's arguments and settings as the real CLI and settings read them, that nothing of the
application's is lost, and the Deployment against the Kubernetes schema."""

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
from tests.deploy.kustomize import DEPLOY, deploy_copy, pod_spec, render

VARIANT = DEPLOY / "k8s-proxy"
#: What the overlay changes in the base's sidecar container, and nothing else.
PROXY_FIELDS = {"args", "env", "restartPolicy", "startupProbe"}


def _by_name(containers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in containers}


def test_the_producer_talks_to_the_sidecar_proxy_on_localhost() -> None:
    resources = render(VARIANT)
    assert ("CronJob", "orders-zdict-train") not in resources, "the proxies train themselves"
    pod = pod_spec(resources, "orders-producer")
    (producer,) = pod["containers"]
    (sidecar,) = pod["initContainers"]
    assert producer["name"] == "producer" and sidecar["name"] == "zdict-sidecar"
    # A native sidecar: started (and ready) before the producer, stopped after it.
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["proxy"]
    assert build_parser().parse_args(sidecar["args"]).command == "proxy"
    env = {e["name"]: e["value"] for e in sidecar["env"] if "value" in e}
    assert all(is_setting(name) for name in env), env
    settings = load_settings(
        proxy={
            "listen": env["ZDICT_PROXY__LISTEN"],
            "topics": yaml.safe_load(env["ZDICT_PROXY__TOPICS"]),
            "allowed_topics": yaml.safe_load(env["ZDICT_PROXY__ALLOWED_TOPICS"]),
            "broker_port_base": env["ZDICT_PROXY__BROKER_PORT_BASE"],
            "group_id": env["ZDICT_PROXY__GROUP_ID"],
        }
    )
    (bootstrap,) = [e for e in producer["env"] if e["name"] == "KAFKA_BOOTSTRAP_SERVERS"]
    assert bootstrap == {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "127.0.0.1:9092"}
    assert settings.proxy.listen == "127.0.0.1:9092"
    assert settings.proxy.topics == ("orders",)
    # The application may produce to its topic, and broker N is served inside the pod at 9100+N.
    assert settings.proxy.allowed_topics == ("orders",)
    assert settings.proxy.broker_port_base == 9100
    # The producer starts once the proxy listens: its /readyz, not /healthz, gates the start.
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"


def test_the_init_container_is_the_base_container_with_only_the_proxys_changes() -> None:
    """One definition of the sidecar container (image, probes, resources, security) serves
    both variants: the overlay moves it, it does not copy it."""
    base = _by_name(pod_spec(render(DEPLOY / "k8s"), "orders-producer")["containers"])
    (sidecar,) = pod_spec(render(VARIANT), "orders-producer")["initContainers"]
    relay = base["zdict-sidecar"]
    assert set(sidecar) == set(relay) | {"restartPolicy"}
    changed = {key for key in sidecar if sidecar.get(key) != relay.get(key)}
    assert changed == PROXY_FIELDS
    assert [e for e in relay["env"] if e not in sidecar["env"]] == []
    probe = {**sidecar["startupProbe"], "httpGet": {**sidecar["startupProbe"]["httpGet"]}}
    probe["httpGet"]["path"] = relay["startupProbe"]["httpGet"]["path"]
    assert probe == relay["startupProbe"]


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


def test_the_overlay_renders_no_volume_claim_without_the_cronjob_that_used_it() -> None:
    base, proxy = render(DEPLOY / "k8s"), render(VARIANT)
    assert ("PersistentVolumeClaim", "zdict-dictionaries") in base
    claims = [key for key in proxy if key[0] == "PersistentVolumeClaim"]
    assert claims == [] and [key for key in proxy if key[0] == "CronJob"] == []


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
