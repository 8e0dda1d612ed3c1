"""Renders of the kustomizations under deploy/ by the real kustomize (`kubectl kustomize`).

`render(directory)` builds a kustomization as `kubectl apply -k` would and returns its resources
by (kind, name); `deploy_copy(tmp_path)` copies deploy/k8s, deploy/k8s-proxy and
deploy/components side by side, so a test can change the base (an application's own Deployment,
say) and render an overlay over it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: The kustomization directories under deploy/ (each rendered by the tests).
KUSTOMIZATIONS = ("k8s", "k8s-proxy")


def kubectl() -> str:
    path = shutil.which("kubectl")
    assert path, "kubectl is not installed (Debian's package `kubectl`): the renders need kustomize"
    return path


def render(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The resources `kubectl kustomize directory` renders, by (kind, name)."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return {
        (doc["kind"], doc["metadata"]["name"]): doc
        for doc in yaml.safe_load_all(result.stdout)
        if doc
    }


def deploy_copy(tmp_path: Path) -> Path:
    """deploy/k8s, deploy/k8s-proxy and deploy/components copied under `tmp_path` (returned),
    relative paths kept."""
    target = tmp_path / "deploy"
    for name in (*KUSTOMIZATIONS, "components"):
        shutil.copytree(DEPLOY / name, target / name)
    return target


def pod_spec(resources: dict[tuple[str, str], dict[str, Any]], name: str) -> dict[str, Any]:
    """The pod template's spec of Deployment `name`."""
    spec: dict[str, Any] = resources[("Deployment", name)]["spec"]["template"]["spec"]
    return spec


def generated(
    resources: dict[tuple[str, str], dict[str, Any]], kind: str, name: str
) -> dict[str, Any]:
    """The one resource of `kind` that a generator named `name` made (`name-<hash>`)."""
    (found,) = [r for (k, n), r in resources.items() if k == kind and n.startswith(f"{name}-")]
    return found
