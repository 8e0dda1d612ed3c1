"""Errors that fail fast (issue 40): one line naming the cause and the setting, no traceback,
before anything waits on a broker."""

from __future__ import annotations

import json
import socket

import pytest
from prometheus_client import CollectorRegistry

from sidecar.cli.main import main
from sidecar.config import MetricsSettings
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError
from sidecar.health import Health, ObservabilityServer
from tests.unit.dictionaries import AddDictionary


def test_a_metrics_port_in_use_is_a_configuration_error_naming_the_port_and_the_setting() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = ObservabilityServer(CollectorRegistry(), Health())
        settings = MetricsSettings(host="127.0.0.1", port=port)
        with pytest.raises(ConfigError) as info:
            server.start_if_enabled(settings)
    message = str(info.value)
    assert f"the metrics port {port} is in use" in message
    assert "ZDICT_METRICS__PORT" in message and "\n" not in message
    assert server.port is None  # nothing half-started is left to stop


def test_a_metrics_host_not_of_this_machine_names_the_host_setting() -> None:
    server = ObservabilityServer(CollectorRegistry(), Health())
    with pytest.raises(
        ConfigError, match=r"cannot listen on 192\.0\.2\.1:0: .*ZDICT_METRICS__HOST"
    ):
        server.start_if_enabled(MetricsSettings(host="192.0.2.1", port=0))


def test_dicts_list_marks_a_corrupt_active_dictionary_and_says_what_to_do(
    store: DictionaryStore,
    add_dictionary: AddDictionary,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sound = add_dictionary("orders")
    corrupt = add_dictionary("orders")
    store.activate("orders", corrupt.id)
    data = store.root / "orders" / f"{corrupt.id}.zdict"
    data.write_bytes(data.read_bytes()[:-1] + b"\0")

    code = main(["dicts", "list", "--json", "--dictionaries", str(store.root)])
    out, err = capsys.readouterr()
    assert code == 1
    listed = {entry["id"]: entry for entry in json.loads(out)}
    assert listed[sound.id]["problem"] is None and not listed[sound.id]["active"]
    assert listed[corrupt.id]["active"] and "sha256" in listed[corrupt.id]["problem"]
    (warning,) = err.splitlines()
    assert warning.startswith("zdict-sidecar: warning: dictionary")
    assert "ACTIVE dictionary of namespace orders" in warning
    assert f"remove orders/{corrupt.id}.zdict" in warning and "dicts activate" in warning


def test_one_unreadable_metadata_file_is_named_and_the_rest_listed(
    store: DictionaryStore,
    add_dictionary: AddDictionary,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kept = add_dictionary("orders")
    other = add_dictionary("clicks")
    broken = add_dictionary("clicks")
    store.activate("clicks", other.id)
    meta = store.root / "clicks" / f"{broken.id}.json"
    meta.write_text("{not json")

    code = main(["dicts", "list", "--dictionaries", str(store.root)])
    out, err = capsys.readouterr()
    assert code == 1
    assert str(kept.id) in out and str(other.id) in out and str(broken.id) not in out
    (warning,) = err.splitlines()
    assert str(meta) in warning and "the other dictionaries are listed" in warning
