"""deploy/compose/proxy-sidecar.yml, the Compose drop-in: merged by the real `docker compose
config` (the Docker CLI's Compose plugin, `make tools`; it needs no engine) over a project
unlike ours (its service's bootstrap servers and SASL settings inline and from an env_file, a
bind mount and a named volume, a dependency, a healthcheck, a database beside it), and compared
field by field with the same project merged without it: what the override adds, the one
variable it rewrites, and that nothing else moved. `python -m deploy.proxy_check` reads the same
merge. What no engine allows here: starting the merged project (`up`)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.proxy_check import PROXY_CONTAINER, findings, main
from sidecar.cli.main import build_parser
from tests.deploy.files import COMPOSE_DROP_IN, compose_config, drop_in, is_setting

PROXY_BOOTSTRAP = "127.0.0.1:9092"

#: A project nothing like deploy/docker-compose.yml: `shop-api` speaks SASL_SSL to its brokers,
#: with settings inline (the list form) and from an env_file, which names its brokers; `db` has
#: nothing to do with Kafka.
FOREIGN = """\
name: shop
services:
  shop-api:
    image: registry.example.com/shop-api:3
    command: ["serve", "--workers", "4"]
    env_file: [shop-kafka.env]
    environment:
      - LOG_LEVEL=info
      - KAFKA_SECURITY_PROTOCOL=SASL_SSL
      - KAFKA_SASL_MECHANISM=SCRAM-SHA-512
    volumes:
      - ./conf:/etc/shop:ro
      - data:/data
    depends_on: [db]
    healthcheck:
      test: curl -f http://localhost:8080/health
    restart: always
  db:
    image: postgres:17
    volumes:
      - pg:/var/lib/postgresql/data
volumes:
  data:
  pg:
"""
ENV_FILE = (
    "KAFKA_SASL_JAAS_CONFIG=org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
    "KAFKA_CLIENT_ID=shop\n"
    "KAFKA_BOOTSTRAP_SERVERS=kafka:9093\n"
)


def _project(tmp_path: Path, compose: str = FOREIGN, env_file: str = ENV_FILE) -> Path:
    """The user's project: their compose file, their env file, and the override copied beside
    them with their service's name written in its one place."""
    (tmp_path / "conf").mkdir(parents=True)
    (tmp_path / "compose.yaml").write_text(compose)
    (tmp_path / "shop-kafka.env").write_text(env_file)
    drop_in(tmp_path, "shop-api")
    return tmp_path


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project without the override, and with it."""
    project = _project(tmp_path_factory.mktemp("compose"))
    alone = compose_config(project, "compose.yaml")
    return alone, compose_config(project, "compose.yaml", "proxy-sidecar.yml")


def test_the_override_changes_only_the_bootstrap_the_network_namespace_and_the_start_order(
    merged: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Every field of the merged project is compared with the project alone: the service's
    KAFKA_BOOTSTRAP_SERVERS is the proxy's, it joins the proxy's network namespace (Compose
    drops its default network) and waits for the proxy to be ready; the proxy and its volume
    are added; nothing else differs, the database included."""
    before, after = merged
    expected = copy.deepcopy(before)
    api = expected["services"]["shop-api"]
    # From the service's env_file: `environment` (the override's) wins over it.
    assert api["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9093"
    api["environment"]["KAFKA_BOOTSTRAP_SERVERS"] = PROXY_BOOTSTRAP
    del api["networks"]
    api["network_mode"] = f"service:{PROXY_CONTAINER}"
    api["depends_on"][PROXY_CONTAINER] = {"condition": "service_healthy", "required": True}
    got = copy.deepcopy(after)
    proxy = got["services"].pop(PROXY_CONTAINER)
    added = got["volumes"].pop("zdict-dictionaries")
    assert got == expected
    assert [v["source"] for v in proxy["volumes"]] == ["zdict-dictionaries"]
    assert added == {"name": "shop_zdict-dictionaries"}
    # The service's own SASL settings (inline and from its env_file) are left in place.
    assert after["services"]["shop-api"]["environment"]["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"


def test_the_proxy_serves_the_services_bootstrap_with_its_settings_written_once(
    merged: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, after = merged
    proxy = after["services"][PROXY_CONTAINER]
    assert build_parser().parse_args(proxy["command"]).command == "proxy"
    env = proxy["environment"]
    assert env["ZDICT_PROXY__LISTEN"] == PROXY_BOOTSTRAP
    assert all(is_setting(name) for name in env), env
    # The topic once; the group named after the project, so that two projects never share it.
    assert json.loads(env["ZDICT_PROXY__TOPICS"]) == ["orders"]
    assert env["ZDICT_PROXY__GROUP_ID"] == "shop-zdict-proxy"
    assert "orders" not in COMPOSE_DROP_IN.read_text().replace("'[\"orders\"]'", "", 1)
    # Ready means listening: the service starts only then.
    test = proxy["healthcheck"]["test"]
    assert test[0] == "CMD" and "/readyz" in test[-1]
    assert after["services"]["shop-api"]["depends_on"][PROXY_CONTAINER]["condition"] == (
        "service_healthy"
    )


def test_the_proxy_check_names_each_sasl_and_tls_setting_left_next_to_the_proxy(
    merged: tuple[dict[str, Any], dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, after = merged
    lines = findings([after])
    named = sorted(line.split(": ")[1].split(" (")[0] for line in lines)
    assert named == ["KAFKA_SASL_JAAS_CONFIG", "KAFKA_SASL_MECHANISM", "KAFKA_SECURITY_PROTOCOL"]
    assert all(line.startswith("service shop-api: ") for line in lines)
    # `docker compose config`'s YAML, piped as the override's comment says, reads the same.
    status = main(io.StringIO(yaml.safe_dump(after)))
    assert status == 1 and capsys.readouterr().out.splitlines() == lines


def test_the_proxy_check_passes_a_plaintext_service_and_names_what_docker_would_refuse(
    tmp_path: Path,
) -> None:
    plain = FOREIGN.replace("      - KAFKA_SECURITY_PROTOCOL=SASL_SSL\n", "").replace(
        "      - KAFKA_SASL_MECHANISM=SCRAM-SHA-512\n", ""
    )
    project = _project(tmp_path / "plain", plain, "KAFKA_CLIENT_ID=shop\n")
    assert findings([compose_config(project, "compose.yaml", "proxy-sidecar.yml")]) == []
    published = plain.replace(
        "    restart: always\n", '    restart: always\n    ports: ["8080:8080"]\n'
    )
    project = _project(tmp_path / "ports", published, "KAFKA_CLIENT_ID=shop\n")
    (line,) = findings([compose_config(project, "compose.yaml", "proxy-sidecar.yml")])
    assert line.startswith("service shop-api: ports is refused by Docker")
