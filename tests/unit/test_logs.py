"""structlog configuration: JSON lines, console, context, exceptions, stdlib routing, redaction."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from sidecar.errors import ConfigError
from sidecar.logs import REDACTED, RepeatedLines, configure_logging, get_logger, is_secret_key


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Leave the root logger, structlog and the context as they were."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    logging.captureWarnings(False)
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_lines_carry_utc_timestamp_level_logger_event_and_key_values(
    stream: io.StringIO,
) -> None:
    configure_logging("json", stream=stream)
    get_logger("sidecar.relay.loop").info("batch_relayed", messages=500, ratio=2.5)

    [line] = lines(stream)
    assert line["event"] == "batch_relayed"
    assert line["level"] == "info"
    assert line["logger"] == "sidecar.relay.loop"
    assert (line["messages"], line["ratio"]) == (500, 2.5)
    assert line["timestamp"].endswith("Z")
    stamp = datetime.fromisoformat(line["timestamp"])
    assert stamp.utcoffset() == UTC.utcoffset(None)
    assert list(line)[:4] == ["timestamp", "level", "logger", "event"]


def test_context_bound_with_contextvars_appears_on_every_line(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    log = get_logger("sidecar.relay.loop")
    structlog.contextvars.bind_contextvars(topic="orders", partition=3, namespace="orders")
    log.info("assigned")
    with structlog.contextvars.bound_contextvars(dict_id=4242):
        log.info("dictionary_switched", version=2)
    log.info("after")

    first, switched, after = lines(stream)
    for line in (first, switched, after):
        assert (line["topic"], line["partition"], line["namespace"]) == ("orders", 3, "orders")
    assert switched["dict_id"] == 4242 and switched["version"] == 2
    assert "dict_id" not in after


def test_logger_initial_values_are_bound(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    get_logger("sidecar.training", namespace="clicks").warning("rejected", gain=0.01)
    [line] = lines(stream)
    assert (line["namespace"], line["level"], line["gain"]) == ("clicks", "warning", 0.01)


def test_secret_values_are_redacted_at_top_level_nested_and_in_context(
    stream: io.StringIO,
) -> None:
    configure_logging("json", stream=stream)
    structlog.contextvars.bind_contextvars(oauthbearer_token="eyJhbGciOi")
    get_logger("sidecar.cli.main").info(
        "kafka_config",
        password="hunter2",
        config={
            "bootstrap.servers": "kafka:9092",
            "sasl.username": "svc",
            "sasl.password": "hunter2",
            "ssl.key.password": "hunter2",
            "ssl.key.pem": "-----BEGIN PRIVATE KEY-----",
            "sasl.oauthbearer.client.secret": "hunter2",
            "nested": [{"api_key": "hunter2", "harmless": 1}],
        },
    )
    text = stream.getvalue()
    assert "hunter2" not in text and "eyJhbGciOi" not in text and "PRIVATE KEY" not in text
    [line] = lines(stream)
    assert line["password"] == REDACTED
    assert line["oauthbearer_token"] == REDACTED
    config = line["config"]
    assert config["bootstrap.servers"] == "kafka:9092"
    assert config["sasl.username"] == "svc"
    assert config["sasl.password"] == config["ssl.key.password"] == REDACTED
    assert config["ssl.key.pem"] == config["sasl.oauthbearer.client.secret"] == REDACTED
    assert config["nested"] == [{"api_key": REDACTED, "harmless": 1}]


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem",
        "ssl.certificate.pem",
        "ssl.ca.pem",
        "https.ca.pem",
        "sasl.jaas.config",
        "basic.auth.user.info",
        "Authorization",
        "access_token",
        "client_secret",
        "API-KEY",
    ],
)
def test_secret_looking_keys_are_recognised(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "event",
        "topic",
        "partition",
        "dict_id",
        "namespace",
        "sasl.username",
        "bypassed",
        "ssl.ca.location",
        "template",
        "pemberton",
    ],
)
def test_ordinary_keys_are_not_redacted(key: str) -> None:
    assert not is_secret_key(key)


def test_stdlib_logging_comes_out_in_the_same_json_format(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    structlog.contextvars.bind_contextvars(partition=1)
    logging.getLogger("confluent_kafka").warning("broker %s down", "kafka:9092")
    logging.getLogger("urllib3").info("token=%s", "x", extra={"password": "hunter2", "retry": 2})

    kafka, urllib3 = lines(stream)
    assert kafka["event"] == "broker kafka:9092 down"
    assert (kafka["level"], kafka["logger"], kafka["partition"]) == (
        "warning",
        "confluent_kafka",
        1,
    )
    assert kafka["timestamp"].endswith("Z")
    assert urllib3["retry"] == 2 and urllib3["password"] == REDACTED


def test_warnings_are_routed_through_logging(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    warnings.warn_explicit("old api", DeprecationWarning, "x.py", 1)
    [line] = lines(stream)
    assert line["logger"] == "py.warnings" and "old api" in line["event"]


def test_exceptions_are_rendered_as_structured_fields_without_frame_locals(
    stream: io.StringIO,
) -> None:
    configure_logging("json", stream=stream)
    log = get_logger("sidecar.relay.loop")
    sasl_password = "hunter2"
    try:
        raise ValueError(f"bad frame ({len(sasl_password)})")
    except ValueError:
        log.exception("encode_failed", offset=17)
    try:
        raise KeyError("k")
    except KeyError:
        logging.getLogger("lib").error("lib_failed", exc_info=True)

    ours, theirs = lines(stream)
    assert ours["level"] == "error" and ours["offset"] == 17
    [exc] = ours["exception"]
    assert exc["exc_type"] == "ValueError" and exc["exc_value"] == "bad frame (7)"
    assert exc["frames"] and exc["frames"][-1]["name"].startswith("test_exceptions")
    assert "hunter2" not in stream.getvalue()
    assert theirs["exception"][0]["exc_type"] == "KeyError"


def test_level_filters_structlog_and_stdlib_events(stream: io.StringIO) -> None:
    configure_logging("json", "warning", stream=stream)
    log = get_logger("sidecar.relay.loop")
    log.debug("noise")
    log.info("noise")
    logging.getLogger("lib").info("noise")
    log.warning("kept")
    assert [line["event"] for line in lines(stream)] == ["kept"]


def test_console_format_renders_the_event_and_key_values_without_colors_off_a_tty(
    stream: io.StringIO,
) -> None:
    configure_logging("console", "debug", stream=stream)
    get_logger("sidecar.relay.loop").debug("batch_relayed", messages=500, password="hunter2")
    text = stream.getvalue()
    assert "batch_relayed" in text and "messages=500" in text and "debug" in text
    assert "hunter2" not in text and "\x1b[" not in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_auto_format_is_json_off_a_terminal_and_console_on_one() -> None:
    piped = io.StringIO()
    configure_logging("auto", stream=piped)
    get_logger("t").info("piped")
    assert lines(piped)[0]["event"] == "piped"

    tty = FakeTTY()
    configure_logging("auto", stream=tty)
    get_logger("t").info("interactive", k=1)
    out = tty.getvalue()
    assert "interactive" in out and not out.lstrip().startswith("{")


def test_configuring_again_replaces_the_handler_instead_of_adding_one(
    stream: io.StringIO,
) -> None:
    first = io.StringIO()
    configure_logging("json", stream=first)
    configure_logging("json", stream=stream)
    get_logger("t").info("once")
    assert first.getvalue() == ""
    assert [line["event"] for line in lines(stream)] == ["once"]


def test_a_logger_made_before_configuration_follows_it(stream: io.StringIO) -> None:
    early = get_logger("sidecar.early")
    configure_logging("json", stream=stream)
    early.info("late_configured")
    assert lines(stream)[0]["logger"] == "sidecar.early"


@pytest.mark.parametrize(("fmt", "level"), [("xml", "info"), ("json", "verbose")])
def test_unknown_format_or_level_is_a_config_error(fmt: str, level: str) -> None:
    with pytest.raises(ConfigError, match=r"log (format|level)"):
        configure_logging(fmt, level, stream=io.StringIO())


FAIL = "FAIL [rdkafka#consumer-6] [thrd:k1:9092/bootstrap]: Connect to ipv4#10.0.0.1:9092 failed"


def test_a_librdkafka_line_repeated_while_a_broker_is_away_is_let_through_once_per_interval(
    stream: io.StringIO,
) -> None:
    configure_logging("json", stream=stream)
    kafka = logging.getLogger("librdkafka.consumer")
    for _ in range(300):  # a few seconds of reconnection attempts
        kafka.error(FAIL)
    kafka.error(FAIL.replace("consumer-6", "consumer-2"))  # another client: its own line
    kafka.warning("MAXPOLL [rdkafka#consumer-6] [thrd:main]: Application maximum poll exceeded")
    kafka.info(FAIL)  # info and debug lines (debug= output) are never held back
    assert [(line["level"], line["event"][:30]) for line in lines(stream)] == [
        ("error", FAIL[:30]),
        ("error", FAIL.replace("consumer-6", "consumer-2")[:30]),
        ("warning", "MAXPOLL [rdkafka#consumer-6] ["),
        ("info", FAIL[:30]),
    ]


def test_the_line_let_through_after_the_interval_says_how_many_were_held_back() -> None:
    now = [100.0]
    repeated = RepeatedLines(interval=10.0, clock=lambda: now[0])

    def passes() -> logging.LogRecord | None:
        record = logging.LogRecord("librdkafka.producer", logging.ERROR, "", 0, FAIL, None, None)
        return record if repeated.filter(record) else None

    assert passes() is not None
    now[0] += 1
    assert [passes() for _ in range(41)] == [None] * 41
    now[0] += 10
    record = passes()
    assert record is not None and record.__dict__["repeated"] == 41
    ordinary = logging.LogRecord("urllib3", logging.ERROR, "", 0, FAIL, None, None)
    assert all(repeated.filter(ordinary) for _ in range(5))
