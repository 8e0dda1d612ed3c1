"""`make image`: the image built for a cluster's registry and pushed in one command. No Docker
engine here: the target's commands are read with `make -n` (printed, not run) and checked; the
refusal without REGISTRY runs for real (it stops before Docker)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tomllib

import yaml

from tests.deploy.kustomize import DEPLOY, ROOT


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    make = shutil.which("make")
    assert make, "make is not installed"
    return subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _docker_command(*args: str) -> list[str]:
    result = _make("-n", "image", *args)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.replace("\\\n", " ").splitlines() if "docker" in line]
    return shlex.split(line)


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_make_image_pushes_the_image_the_kubernetes_manifests_name() -> None:
    """With the registry of deploy/k8s's `images:`, the pushed name and tag are that entry."""
    (image,) = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())["images"]
    registry = image["newName"].rpartition("/")[0]
    command = _docker_command(f"REGISTRY={registry}")
    assert command[:3] == ["docker", "buildx", "build"]
    assert _option(command, "--tag") == f"{image['newName']}:{image['newTag']}"
    assert "--push" in command and command[-1] == "."
    assert (ROOT / _option(command, "--file")).is_file()
    # The nodes' platform, not the building machine's.
    assert _option(command, "--platform") == "linux/amd64"


def test_the_tag_is_the_package_version_and_every_part_can_be_set() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    command = _docker_command("REGISTRY=r.example.com/team")
    assert _option(command, "--tag") == f"r.example.com/team/zdict-sidecar:{version}"
    command = _docker_command("REGISTRY=r.example.com", "TAG=2.0.0", "PLATFORM=linux/arm64")
    assert _option(command, "--tag") == "r.example.com/zdict-sidecar:2.0.0"
    assert _option(command, "--platform") == "linux/arm64"


def test_make_image_without_a_registry_stops_with_one_line_naming_it() -> None:
    result = _make("image")
    assert result.returncode != 0
    (first, *_) = result.stderr.splitlines()
    assert first.startswith("make image: set REGISTRY")
    assert "docker" not in result.stdout
