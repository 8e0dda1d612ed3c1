"""deploy/kafka/kafka-local's cluster configuration, without a JVM: the nodes' layout, who is a
controller, and what each node's server.properties says (the running cluster is
tests/integration/test_local_cluster.py)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "kafka-local"


@pytest.fixture(scope="module")
def kafka_local() -> Iterator[ModuleType]:
    """The script as a module (it has no .py suffix, so by an explicit loader). It is in
    sys.modules while the tests run: its dataclasses look their module up there."""
    name = "kafka_local_script"
    loader = importlib.machinery.SourceFileLoader(name, str(SCRIPT))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")
    return {key: value for key, value in pairs}


def _node_properties(kafka_local: ModuleType, tmp_path: Path, size: int) -> list[dict[str, str]]:
    """Each node's server.properties as `_configure_fresh` renders them (ports 1000 + i)."""
    inst = kafka_local.Instance(tmp_path, own_home=True)
    nodes = inst.nodes(size)
    controllers = kafka_local.voters(size)
    quorum = ",".join(f"{i}@127.0.0.1:{2000 + i}" for i in range(1, controllers + 1))
    out = []
    for node in nodes:
        controller = f"127.0.0.1:{2000 + node.node_id}" if node.node_id <= controllers else None
        cluster = kafka_local.cluster_settings(
            node.node_id, size, quorum, f"127.0.0.1:{1000 + node.node_id}", controller
        )
        text = kafka_local.render_properties(node, 1000 + node.node_id, 2001, None, (), cluster)
        out.append(_properties(text))
    return out


def test_a_single_broker_keeps_the_template_and_the_instance_directory(
    kafka_local: ModuleType, tmp_path: Path
) -> None:
    (node,) = kafka_local.Instance(tmp_path).nodes(1)
    assert node.home == tmp_path and node.props == tmp_path / "server.properties"
    assert kafka_local.cluster_settings(1, 1, "1@127.0.0.1:2001", "127.0.0.1:1001", "x") == []
    template = kafka_local.TEMPLATE.read_text()
    rendered = kafka_local.render_properties(node, 1001, 2001)
    assert rendered == (
        template.replace("{{BROKER_PORT}}", "1001")
        .replace("{{CONTROLLER_PORT}}", "2001")
        .replace("{{DATA_DIR}}", str(tmp_path / "data"))
    )


@pytest.mark.parametrize(
    ("size", "controllers", "replication", "min_isr"),
    [(2, 1, "2", "2"), (3, 3, "3", "2"), (4, 3, "3", "2")],
)
def test_a_cluster_has_its_voters_and_replication(
    kafka_local: ModuleType,
    tmp_path: Path,
    size: int,
    controllers: int,
    replication: str,
    min_isr: str,
) -> None:
    nodes = _node_properties(kafka_local, tmp_path, size)
    quorum = ",".join(f"{i}@127.0.0.1:{2000 + i}" for i in range(1, controllers + 1))
    for node_id, props in enumerate(nodes, start=1):
        controller = node_id <= controllers
        assert props["node.id"] == str(node_id)
        assert props["process.roles"] == ("broker,controller" if controller else "broker")
        assert props["controller.quorum.voters"] == quorum
        listeners = f"PLAINTEXT://127.0.0.1:{1000 + node_id}" + (
            f",CONTROLLER://127.0.0.1:{2000 + node_id}" if controller else ""
        )
        assert props["listeners"] == props["advertised.listeners"] == listeners
        assert props["log.dirs"] == str(tmp_path / f"node-{node_id}" / "data")
        for key in (
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "share.coordinator.state.topic.replication.factor",
            "default.replication.factor",
        ):
            assert props[key] == replication, key
        for key in (
            "transaction.state.log.min.isr",
            "share.coordinator.state.topic.min.isr",
            "min.insync.replicas",
        ):
            assert props[key] == min_isr, key
