"""deploy/components/proxy-sidecar, the drop-in path: rendered by the real kustomize over a
Deployment unlike ours (other containers, variables in every form, its own init containers and
volumes, its own SASL settings, its own pod security), and compared field by field with that
Deployment: what the component adds, the one variable it rewrites, and that nothing else moved.
`python -m deploy.proxy_check` is run on the same render."""

from __future__ import annotations

import copy
import io
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.proxy_check import findings, main
from sidecar.cli.main import build_parser
from tests.deploy.kustomize import DEPLOY, generated, kubectl, pod_spec, render

COMPONENT = "proxy-sidecar"
IMAGE = ("registry.example.com/zdict-sidecar", "0.1.0")
PROXY = {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "127.0.0.1:9092"}
#: The volumes the component brings, named so that they meet no application's.
PROXY_VOLUMES = {"zdict-dictionaries", "zdict-tmp", "zdict-kafka-ca"}

#: An application's own Deployment, nothing like deploy/k8s's: its bootstrap servers come from
#: a Secret in one container and are a value in another; it speaks SASL_SSL to Kafka (inline
#: and through a ConfigMap); it has a container without Kafka, an init container, volumes named
#: as ours are in deploy/k8s (tmp), and a pod user of its own.
FOREIGN: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "shop-api", "labels": {"app": "shop"}},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "shop"}},
        "template": {
            "metadata": {"labels": {"app": "shop"}},
            "spec": {
                "securityContext": {"runAsUser": 2000, "fsGroup": 2000},
                "initContainers": [
                    {
                        "name": "migrate",
                        "image": "registry.example.com/shop-migrate:3",
                        "env": [{"name": "DB_URL", "value": "postgres://db/shop"}],
                    }
                ],
                "containers": [
                    {
                        "name": "api",
                        "image": "registry.example.com/shop-api:3",
                        "env": [
                            {"name": "LOG_LEVEL", "value": "info"},
                            {
                                "name": "KAFKA_BOOTSTRAP_SERVERS",
                                "valueFrom": {
                                    "secretKeyRef": {"name": "shop-kafka", "key": "brokers"}
                                },
                            },
                            {"name": "KAFKA_SECURITY_PROTOCOL", "value": "SASL_SSL"},
                            {"name": "KAFKA_SASL_MECHANISM", "value": "SCRAM-SHA-512"},
                        ],
                        "envFrom": [{"configMapRef": {"name": "shop-kafka-client"}}],
                        "ports": [{"name": "metrics", "containerPort": 8080}],
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    },
                    {
                        "name": "worker",
                        "image": "registry.example.com/shop-worker:3",
                        "env": [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "kafka:9093"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    },
                    {"name": "nginx", "image": "nginx:1.27"},
                ],
                "volumes": [
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "shop-data"}},
                ],
            },
        },
    },
}
CLIENT_CONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "shop-kafka-client"},
    "data": {"KAFKA_SASL_JAAS_CONFIG": "org.apache.kafka...", "KAFKA_CLIENT_ID": "shop"},
}


def _overlay(tmp_path: Path, deployment: dict[str, Any]) -> Path:
    """An application (the Deployment and its client ConfigMap) and the overlay a user writes:
    the component, and the proxy's settings in one generated ConfigMap."""
    shutil.copytree(DEPLOY / "components", tmp_path / "components")
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.yaml").write_text(yaml.safe_dump_all([deployment, CLIENT_CONFIG]))
    (app / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["app.yaml"]}))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "zdict-sidecar.env").write_text(
        "KAFKA_BOOTSTRAP_SERVERS=kafka:9093\n"
        'ZDICT_PROXY__TOPICS=["shop-orders"]\n'
        "ZDICT_PROXY__GROUP_ID=shop-zdict-proxy\n"
    )
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../app"],
        "components": [f"../components/{COMPONENT}"],
        "images": [{"name": "zdict-sidecar", "newName": IMAGE[0], "newTag": IMAGE[1]}],
        "configMapGenerator": [{"name": "zdict-sidecar-config", "envs": ["zdict-sidecar.env"]}],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return overlay


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    return render(_overlay(tmp_path_factory.mktemp("component"), FOREIGN))


def test_the_component_adds_the_proxy_as_the_first_init_container_a_native_sidecar(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    pod = pod_spec(rendered, "shop-api")
    proxy, migrate = pod["initContainers"]
    assert migrate == FOREIGN["spec"]["template"]["spec"]["initContainers"][0]
    assert proxy["name"] == "zdict-sidecar" and proxy["restartPolicy"] == "Always"
    assert proxy["image"] == ":".join(IMAGE), "the overlay's images: names the proxy's image"
    assert build_parser().parse_args(proxy["args"]).command == "proxy"
    env = {e["name"]: e.get("value") for e in proxy["env"]}
    assert env["ZDICT_PROXY__LISTEN"] == PROXY["value"]
    # The settings the user wrote once, in the overlay, reach the proxy under their hashed name.
    config = generated(rendered, "ConfigMap", "zdict-sidecar-config")
    assert {"configMapRef": {"name": config["metadata"]["name"]}} in proxy["envFrom"]
    assert config["data"]["ZDICT_PROXY__TOPICS"] == '["shop-orders"]'
    # Its own user, whatever the pod's: the image's files belong to 10001.
    assert proxy["securityContext"]["runAsUser"] == 10001
    assert {m["name"] for m in proxy["volumeMounts"]} == PROXY_VOLUMES


def test_the_component_changes_only_the_bootstrap_variable_and_adds_only_its_own(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Every field of the application's Deployment is compared with the render: the bootstrap
    variable of each container that has one (a Secret's key, a value) becomes the proxy's, in
    its place; the proxy's init container and volumes are added; nothing else differs."""
    expected = copy.deepcopy(FOREIGN)
    pod = expected["spec"]["template"]["spec"]
    for container in pod["containers"]:
        if "env" in container:
            container["env"] = [
                PROXY if e["name"] == "KAFKA_BOOTSTRAP_SERVERS" else e for e in container["env"]
            ]
    deployment = copy.deepcopy(rendered[("Deployment", "shop-api")])
    got = deployment["spec"]["template"]["spec"]
    proxy = got["initContainers"].pop(0)
    assert proxy["name"] == "zdict-sidecar"
    added = [v for v in got["volumes"] if v["name"] in PROXY_VOLUMES]
    got["volumes"] = [v for v in got["volumes"] if v["name"] not in PROXY_VOLUMES]
    assert {v["name"] for v in added} == PROXY_VOLUMES
    assert deployment == expected
    # The application's own SASL settings are left in place (deploy.proxy_check reports them),
    # as is the ConfigMap they load.
    assert rendered[("ConfigMap", "shop-kafka-client")] == CLIENT_CONFIG
    # The address's source is kustomize's local configuration, not a resource of the render.
    assert {kind for kind, _ in rendered} == {"Deployment", "ConfigMap"}


def test_the_proxy_check_names_each_sasl_and_tls_setting_left_next_to_the_proxy(
    rendered: dict[tuple[str, str], dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = findings(rendered.values())
    named = sorted(line.split(": ")[1].split(" (")[0] for line in lines)
    assert named == ["KAFKA_SASL_JAAS_CONFIG", "KAFKA_SASL_MECHANISM", "KAFKA_SECURITY_PROTOCOL"]
    assert all(line.startswith("Deployment shop-api, container api: ") for line in lines)
    status = main(io.StringIO(yaml.safe_dump_all(list(rendered.values()))))
    assert status == 1 and capsys.readouterr().out.splitlines() == lines


def test_the_proxy_check_passes_a_plaintext_application_and_the_example_overlay(
    tmp_path: Path,
) -> None:
    plain = copy.deepcopy(FOREIGN)
    (api, *_) = plain["spec"]["template"]["spec"]["containers"]
    api["env"] = [e for e in api["env"] if "SASL" not in e["name"]]
    api["env"].append({"name": "KAFKA_SECURITY_PROTOCOL", "value": "PLAINTEXT"})
    del api["envFrom"]
    assert findings(render(_overlay(tmp_path, plain)).values()) == []
    assert findings(render(DEPLOY / "k8s-proxy").values()) == []


def test_a_deployment_without_the_bootstrap_variable_fails_the_render_naming_it(
    tmp_path: Path,
) -> None:
    """A container that finds its brokers elsewhere would bypass the proxy: no silent render."""
    other = copy.deepcopy(FOREIGN)
    for container in other["spec"]["template"]["spec"]["containers"]:
        container.pop("env", None)
    result = subprocess.run(
        [kubectl(), "kustomize", str(_overlay(tmp_path, other))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "env.[name=KAFKA_BOOTSTRAP_SERVERS]" in result.stderr


def test_kubernetes_validate_accepts_the_foreign_deployment_with_the_proxy(
    rendered: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is not installed: `pip install -e '.[dev]'`"
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(rendered[("Deployment", "shop-api")]))
    result = subprocess.run(
        [tool, "--strict", "--kubernetes-version", "1.29.0", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
