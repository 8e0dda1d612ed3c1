"""deploy/k8s-proxy: the Kubernetes variant in which the producer's bootstrap.servers is the
sidecar proxy on localhost. The overlay's patches are applied here as kustomize applies them
(JSON patches, a `$patch: delete`), and the result is checked: the producer, the sidecar's
arguments and settings as the real CLI and settings read them, and the Deployment against the
Kubernetes schema."""

from __future__ import annotations

import copy
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

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s"
VARIANT = ROOT / "deploy" / "k8s-proxy"


def _pointer(path: str) -> list[str | int]:
    return [int(p) if p.isdigit() else p for p in path.strip("/").split("/")]


def _apply(document: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 add, replace, remove and move: what the overlay uses."""
    doc = copy.deepcopy(document)

    def parent(path: str) -> tuple[Any, str | int]:
        parts = _pointer(path)
        node = doc
        for part in parts[:-1]:
            node = node[part]
        return node, parts[-1]

    def remove(path: str) -> Any:
        node, key = parent(path)
        return node.pop(key)

    def add(path: str, value: Any) -> None:
        node, key = parent(path)
        if isinstance(node, list):
            node.insert(len(node) if key == "-" else int(key), value)
        else:
            node[key] = value

    for op in operations:
        if op["op"] == "add":
            add(op["path"], op["value"])
        elif op["op"] == "replace":
            node, key = parent(op["path"])
            assert key in node if isinstance(node, dict) else int(key) < len(node), op
            node[key] = op["value"]
        elif op["op"] == "remove":
            remove(op["path"])
        elif op["op"] == "move":
            add(op["path"], remove(op["from"]))
        else:
            raise AssertionError(f"operation {op['op']} is not handled here")
    return doc


def _built() -> dict[tuple[str, str], Any]:
    """The base's resources with the variant's patches applied, by (kind, name)."""
    kustomization = yaml.safe_load((VARIANT / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../k8s"]
    base = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    resources = {}
    for name in base["resources"]:
        doc = yaml.safe_load((BASE / name).read_text())
        resources[(doc["kind"], doc["metadata"]["name"])] = doc
    for entry in kustomization["patches"]:
        key = (entry["target"]["kind"], entry["target"]["name"])
        assert key in resources, f"the patch targets {key}, which the base does not have"
        patch = yaml.safe_load(entry["patch"])
        if isinstance(patch, dict) and patch.get("$patch") == "delete":
            del resources[key]
        else:
            resources[key] = _apply(resources[key], patch)
    return resources


def test_the_producer_talks_to_the_sidecar_proxy_on_localhost() -> None:
    resources = _built()
    assert ("CronJob", "orders-zdict-train") not in resources, "the proxies train themselves"
    pod = resources[("Deployment", "orders-producer")]["spec"]["template"]["spec"]
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
            "group_id": env["ZDICT_PROXY__GROUP_ID"],
        }
    )
    (bootstrap,) = [e["value"] for e in producer["env"] if e["name"] == "KAFKA_BOOTSTRAP_SERVERS"]
    assert bootstrap == settings.proxy.listen == "127.0.0.1:9092"
    assert settings.proxy.topics == ("orders",)
    # The producer starts once the proxy listens: its /readyz, not /healthz, gates the start.
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("version", ["1.29.0", "1.37.0"])
def test_kubernetes_validate_accepts_the_patched_deployment(version: str, tmp_path: Path) -> None:
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is not installed: `pip install -e '.[dev]'`"
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(yaml.safe_dump(_built()[("Deployment", "orders-producer")]))
    result = subprocess.run(
        [tool, "--strict", "--kubernetes-version", version, str(deployment)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
