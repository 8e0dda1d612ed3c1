"""deploy/docker-compose.yml, parsed strictly by compose-spec and checked.

No Docker engine runs here, so the stack is never started. What is checked: compose-spec (PyPI,
Python bindings of the Rust `compose_spec` crate) accepts the file as the Compose Specification
defines it (unknown keys, unknown enum values, malformed durations and ports, wrong types are
refused); `tests.deploy_files.load_compose` adds the references between services that
compose-spec leaves out (depends_on targets, declared named volumes), and the normalised project
wires the stack as the README describes: every bind-mounted file exists, ports, healthchecks,
start order, the scrape target, the data source, and settings that zdict-sidecar really reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.files import ComposeError, is_setting, load_compose

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    return load_compose(COMPOSE)


def _services(project: dict[str, Any]) -> dict[str, Any]:
    services: dict[str, Any] = project["services"]
    return services


def test_compose_spec_accepts_the_file_as_project_zdict_sidecar(project: dict[str, Any]) -> None:
    assert project["name"] == "zdict-sidecar"
    assert set(_services(project)) == {
        "kafka",
        "producer",
        "sidecar",
        "prometheus",
        "grafana",
    }


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        # refused by compose-spec itself
        ("    restart: unless-stopped\n", "    restart: unless-stopped\n    bogus: 1\n", "bogus"),
        ("condition: service_healthy", "condition: service_hungry", "service_hungry"),
        ("restart: unless-stopped", "restart: sometimes", "sometimes"),
        ("interval: 10s", "interval: ten", "ten"),
        ('"9090:9090"', '"90x90:9090"', "90x90"),
        # refused by load_compose's reference checks (compose-spec accepts both)
        ("    depends_on:\n      - sidecar\n", "    depends_on:\n      - sidecr\n", "sidecr"),
        ("- prometheus-data:/prometheus", "- prometheus-db:/prometheus", "prometheus-db"),
    ],
)
def test_a_file_that_breaks_the_specification_or_its_references_is_refused(
    tmp_path: Path, old: str, new: str, complaint: str
) -> None:
    text = COMPOSE.read_text()
    assert old in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new, 1))
    with pytest.raises(ComposeError, match=complaint):
        load_compose(broken)


def test_a_variable_is_refused_because_compose_spec_does_not_interpolate(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("apache/kafka:4.1.1", "apache/kafka:${TAG}", 1))
    with pytest.raises(ComposeError, match="not interpolated"):
        load_compose(broken)


def test_the_short_syntax_is_written_out_in_the_long_form(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "compose.yml"
    path.write_text(
        "services:\n"
        "  a:\n"
        "    build: ./app\n"
        "    command: run --port 80\n"
        "    environment: [A=1, B]\n"
        "    healthcheck: {test: curl -f http://localhost}\n"
        '    ports: ["8080:80", "127.0.0.1:90:91/udp", 7000]\n'
        "    volumes: [./conf:/etc/conf:ro, data:/data, /scratch]\n"
        "    depends_on: [b]\n"
        "  b:\n"
        "    image: busybox\n"
        "volumes:\n"
        "  data:\n"
    )
    service = load_compose(path)["services"]["a"]
    assert service["build"] == {"context": str(tmp_path / "app"), "dockerfile": "Dockerfile"}
    assert service["command"] == ["run", "--port", "80"]
    assert service["environment"] == {"A": "1", "B": ""}
    assert service["healthcheck"]["test"] == ["CMD-SHELL", "curl -f http://localhost"]
    assert service["ports"] == [
        {"target": 80, "published": 8080, "protocol": "tcp"},
        {"target": 91, "published": 90, "protocol": "udp", "host_ip": "127.0.0.1"},
        {"target": 7000, "protocol": "tcp"},
    ]
    assert service["volumes"] == [
        {
            "type": "bind",
            "source": str(tmp_path / "conf"),
            "target": "/etc/conf",
            "read_only": True,
        },
        {"type": "volume", "source": "data", "target": "/data", "read_only": False},
        {"type": "volume", "target": "/scratch", "read_only": False},
    ]
    assert service["depends_on"] == {"b": {"condition": "service_started"}}


def test_kafka_is_the_official_image_in_kraft_mode_advertising_its_service_name(
    project: dict[str, Any],
) -> None:
    kafka = _services(project)["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    for name in ("producer", "sidecar"):
        assert _services(project)[name]["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"


def test_the_zdict_services_are_built_from_the_repository_dockerfile(
    project: dict[str, Any],
) -> None:
    for name in ("producer", "sidecar"):
        build = _services(project)[name]["build"]
        assert Path(build["context"]) == ROOT, name
        assert (ROOT / build["dockerfile"]).is_file()


def test_every_bind_mount_source_exists_and_named_volumes_are_declared(
    project: dict[str, Any],
) -> None:
    mounts = 0
    for name, service in _services(project).items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert Path(volume["source"]).exists(), (name, volume["source"])
                mounts += 1
            else:
                assert volume["source"] in project["volumes"], (name, volume)
    assert mounts >= 4
    prometheus = {
        v["target"]: Path(v["source"]) for v in _services(project)["prometheus"]["volumes"]
    }
    config = yaml.safe_load((prometheus["/etc/prometheus"] / "prometheus.yml").read_text())
    for rule_file in config["rule_files"]:
        assert (prometheus["/etc/prometheus"] / rule_file).is_file()


def test_the_sidecar_keeps_its_dictionary_cache_on_a_named_volume(project: dict[str, Any]) -> None:
    (volume,) = [
        v
        for v in _services(project)["sidecar"]["volumes"]
        if v["target"] == "/var/lib/zdict/dictionaries"
    ]
    assert volume["type"] == "volume" and volume["source"] == "dictionaries"


def test_published_ports_are_grafana_prometheus_the_sidecar_and_kafka_each_once(
    project: dict[str, Any],
) -> None:
    published = {
        int(port["published"]): (name, port["target"])
        for name, service in _services(project).items()
        for port in service.get("ports", [])
    }
    assert published == {
        3000: ("grafana", 3000),
        9090: ("prometheus", 9090),
        9400: ("sidecar", 9400),
        29092: ("kafka", 29092),
    }


def test_long_running_services_have_healthchecks_and_start_after_what_they_need(
    project: dict[str, Any],
) -> None:
    services = _services(project)
    for name in ("kafka", "sidecar", "prometheus", "grafana"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    for name in ("producer", "sidecar"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy", name
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert "sidecar" in services["prometheus"]["depends_on"]


def test_prometheus_scrapes_the_sidecar_service_and_grafana_reads_that_prometheus(
    project: dict[str, Any],
) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "zdict-sidecar"]
    (target,) = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    sidecar = _services(project)[host]
    assert sidecar["environment"]["ZDICT_METRICS__PORT"] == port
    datasources = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"
    grafana = {v["target"]: Path(v["source"]) for v in _services(project)["grafana"]["volumes"]}
    home = _services(project)["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (grafana["/var/lib/grafana/dashboards"] / Path(home).name).is_file()


def test_the_producer_produces_through_the_sidecar_proxy_on_localhost(
    project: dict[str, Any],
) -> None:
    services = _services(project)
    sidecar, producer = services["sidecar"], services["producer"]
    assert sidecar["command"] == ["proxy"]
    # The topic, written once in the file: the producer writes the first the proxy compresses.
    topics = json.loads(sidecar["environment"]["ZDICT_PROXY__TOPICS"])
    assert topics == ["events"]
    assert (
        producer["environment"]["ZDICT_PROXY__TOPICS"]
        == sidecar["environment"]["ZDICT_PROXY__TOPICS"]
    )
    assert "DEMO_TOPIC" not in producer["environment"]
    assert COMPOSE.read_text().split("\nname: ", 1)[1].count("events") == 1
    for variable in sidecar["environment"]:
        assert is_setting(variable), variable
    # One network namespace, as in a pod: the producer's localhost is the sidecar's.
    assert producer["network_mode"] == "service:sidecar"
    listen = sidecar["environment"]["ZDICT_PROXY__LISTEN"]
    assert listen.startswith("127.0.0.1:")
    assert producer["environment"]["DEMO_PRODUCE_TO"] == "localhost:" + listen.split(":")[1]
    assert producer["depends_on"]["sidecar"]["condition"] == "service_healthy"


def test_a_service_of_the_zdict_image_that_is_not_the_relay_disables_the_images_healthcheck(
    project: dict[str, Any],
) -> None:
    """The image's HEALTHCHECK asks the relay's /healthz: a container of the same image running
    something else (the demo producer) never answers it, turns unhealthy and fails `up --wait`."""
    image = {name: s for name, s in _services(project).items() if "build" in s}
    assert set(image) == {"producer", "sidecar"}
    for name, service in image.items():
        relay = service.get("command") in (["run"], ["proxy"]) and "entrypoint" not in service
        if relay:
            assert "/healthz" in " ".join(service["healthcheck"]["test"]) or (
                "/readyz" in " ".join(service["healthcheck"]["test"])
            ), name
        else:
            assert service["healthcheck"] == {"disable": True}, name


def test_the_producer_starts_once_the_proxy_is_ready_not_merely_alive(
    project: dict[str, Any],
) -> None:
    """was: the sidecar's healthcheck asked /healthz, 200 from the first moment, so the demo
    producer could start before the proxy listened (issue 28, point 11)."""
    services = _services(project)
    assert services["producer"]["depends_on"]["sidecar"]["condition"] == "service_healthy"
    test = services["sidecar"]["healthcheck"]["test"]
    assert test[0] == "CMD" and "/readyz" in test[-1] and "/healthz" not in test[-1]


def test_the_header_comment_describes_exactly_the_services_of_the_file(
    project: dict[str, Any],
) -> None:
    header = COMPOSE.read_text().split("\nname: ", 1)[0]
    described = set(re.findall(r"^#   (\w+) ", header, flags=re.MULTILINE))
    assert described == set(_services(project))
