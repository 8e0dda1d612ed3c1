"""Settings: sources, precedence and errors that name the setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecar.config import (
    MAX_CONFIG_BYTES,
    environment_help,
    environment_variables,
    is_secret_property,
    load_settings,
)
from sidecar.errors import ConfigError

#: Every librdkafka property that can hold a secret (librdkafka's CONFIGURATION.md), and
#: sasl.jaas.config, which Java-minded configurations carry along.
LIBRDKAFKA_SECRETS = (
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "ssl.certificate.pem",
    "ssl.ca.pem",
    "https.ca.pem",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.jaas.config",
)


def test_defaults_need_no_configuration() -> None:
    settings = load_settings()
    assert settings.codec.header_key == "zd"
    assert settings.dictionaries == Path("dictionaries")


def test_nested_environment_variables_set_nested_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZDICT_CODEC__LEVEL", "1")
    monkeypatch.setenv("ZDICT_TRAINING__LEVELS", "[1, 3]")
    settings = load_settings()
    assert settings.codec.level == 1
    assert settings.training.levels == (1, 3)


def test_flags_beat_environment_beats_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "zdict.toml"
    config.write_text('dictionaries = "/from/file"\n[codec]\nlevel = 5\nmin_size = 40\n')
    monkeypatch.setenv("ZDICT_CODEC__LEVEL", "2")
    settings = load_settings(config)
    assert (settings.codec.level, settings.codec.min_size) == (2, 40)
    assert settings.dictionaries == Path("/from/file")
    assert load_settings(config, dictionaries="/from/flag").dictionaries == Path("/from/flag")


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        (
            "ZDICT_CODEC__LEVEL",
            "99",
            "ZDICT_CODEC__LEVEL: Input should be less than or equal to 22",
        ),
        ("ZDICT_CODEC__HEADER_KEY", "", "ZDICT_CODEC__HEADER_KEY"),
        ("ZDICT_TRAINING__DICT_SIZES", "[10]", "ZDICT_TRAINING__DICT_SIZES"),
        ("ZDICT_TRAINING__HELDOUT_FRACTION", "1.5", "ZDICT_TRAINING__HELDOUT_FRACTION"),
        ("ZDICT_LOG_FORMAT", "xml", "ZDICT_LOG_FORMAT"),
    ],
)
def test_invalid_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=message):
        load_settings()


def test_the_input_producers_level_is_of_zstd_input_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZDICT_RELAY__INPUT_COMPRESSION_LEVEL", "9")
    with pytest.raises(ConfigError, match="INPUT_COMPRESSION_LEVEL is the level of zstd input"):
        load_settings()
    monkeypatch.setenv("ZDICT_RELAY__INPUT_COMPRESSION", "zstd")
    assert load_settings().relay.input_compression_level == 9


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        (
            "ZDICT_RELAY__MODE",
            "x",
            "ZDICT_RELAY__MODE: Input should be 'encode' or 'decode' (got 'x')",
        ),
        (
            "ZDICT_RELAY__GUARANTEE",
            "twice",
            "ZDICT_RELAY__GUARANTEE: Input should be 'at-least-once' or 'exactly-once' "
            "(got 'twice')",
        ),
        (
            "ZDICT_LOG_FORMAT",
            "xml",
            "ZDICT_LOG_FORMAT: Input should be 'auto', 'json' or 'console' (got 'xml')",
        ),
        (
            "ZDICT_LOG_LEVEL",
            "loud",
            "ZDICT_LOG_LEVEL: Input should be 'debug', 'info', 'warning' or 'error' (got 'loud')",
        ),
    ],
)
def test_a_value_outside_a_choice_names_the_variable_the_choices_and_the_input(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == f"invalid configuration: {message}"


def test_every_choice_setting_takes_each_of_its_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZDICT_RELAY__MODE", "decode")
    monkeypatch.setenv("ZDICT_RELAY__GUARANTEE", "exactly-once")
    monkeypatch.setenv("ZDICT_LOG_FORMAT", "console")
    monkeypatch.setenv("ZDICT_LOG_LEVEL", "error")
    settings = load_settings()
    assert (settings.relay.mode, settings.relay.guarantee) == ("decode", "exactly-once")
    assert (settings.log_format, settings.log_level) == ("console", "error")


def test_environment_help_gives_each_setting_its_description_choices_and_default() -> None:
    variables = dict(environment_variables())
    assert variables["ZDICT_RELAY__MODE"].endswith("(encode|decode, default encode)")
    assert variables["ZDICT_TRAINING__RETRAIN_INTERVAL"] == (
        "seconds between scheduled training runs (default 3600)"
    )
    assert variables["ZDICT_TRAINING__LEVELS"].endswith("(default [-1, 1, 3, 6, 9, 12])")
    assert variables["ZDICT_REGISTRY__ENABLED"].endswith("(default true)")
    # Unset by default: the description says what unset means, no "(default ...)".
    assert variables["ZDICT_CODEC__LEVEL"] == "zstd level; unset: the level chosen at training"
    assert all(text for text in variables.values())


def test_environment_help_lists_the_free_form_variables_instead_of_kafka_fields() -> None:
    names = [name for name, _ in environment_variables()]
    for free in ("KAFKA", "CONSUMER", "PRODUCER"):
        assert f"ZDICT_{free}__<PROPERTY>" in names
        assert f"ZDICT_{free}__PROPERTIES" not in names
    assert names[-1] == "KAFKA_BOOTSTRAP_SERVERS"


def test_environment_help_wraps_beside_the_names_within_the_width() -> None:
    text = environment_help(width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    column = lines[1].index("the local dictionary store")
    for line in lines[1:]:
        assert line.startswith(("  ZDICT_", "  KAFKA_")) or (
            line[:column].isspace() and not line[column].isspace()
        )
    assert "at-least-once|exactly-once" in text.replace("\n" + " " * column, " ")


def test_unknown_keys_in_a_config_file_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "zdict.toml"
    config.write_text("[codec]\nlevle = 3\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert f"ZDICT_CODEC__LEVLE (or codec.levle in {config}): Extra inputs" in str(info.value)


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("ZDICT_PROXY__FORWARD", "true", "always forwards now"),
        ("ZDICT_PROXY__UPSTREAM_TOPIC", "{topic}.zd", "the name the client uses"),
        ("ZDICT_PROXY__LINGER_MS", "5", "the clients' own batches"),
        ("ZDICT_PROXY__METADATA_MAX_AGE", "30", "nothing is cached"),
    ],
)
def test_a_setting_of_the_removed_produce_proxy_stops_the_start_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, why: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert f"{variable}: no longer a setting (" in message
    assert why in message
    assert "remove it" in message


def test_a_removed_setting_in_a_config_file_is_named_with_its_key(tmp_path: Path) -> None:
    config = tmp_path / "zdict.toml"
    config.write_text("[proxy]\nlinger_ms = 5\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert f"ZDICT_PROXY__LINGER_MS (or proxy.linger_ms in {config}): no longer a setting" in str(
        info.value
    )


def test_a_config_file_with_a_syntax_error_is_named(tmp_path: Path) -> None:
    config = tmp_path / "zdict.toml"
    config.write_text("[codec\n")
    with pytest.raises(ConfigError, match=r"zdict\.toml"):
        load_settings(config)


def test_a_first_sample_smaller_than_training_needs_is_refused_naming_both_settings() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(sampling={"min_messages": 500}, training={"min_samples": 1000})
    assert "ZDICT_SAMPLING__MIN_MESSAGES" in str(err.value)
    assert "ZDICT_TRAINING__MIN_SAMPLES" in str(err.value)
    assert "got" not in str(err.value)  # no echo of the whole settings tree


def test_a_scrub_pattern_that_does_not_compile_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"ZDICT_TRAINING__SCRUB: .*not a regular expression"):
        load_settings(training={"scrub": ["(unclosed"]})


@pytest.mark.parametrize(
    ("var", "value", "shown"),
    [
        ("ZDICT_TRAINING__SCRUB", "notjson", "Expecting value"),
        ("ZDICT_RELAY__INPUT_TOPICS", "orders,clicks", "Expecting value"),
        ("ZDICT_TRAINING__LEVELS", "[1,", "Expecting value"),
        ("ZDICT_TRAINING__SCRUB", "[" * 100_000, "nested too deeply"),
        ("ZDICT_CODEC", "{level: 3}", "Expecting property name"),
    ],
)
def test_a_variable_that_must_be_json_and_is_not_is_named(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, shown: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert f"{var}: not valid JSON: {shown}" in message
    assert "config file" not in message and "None" not in message


def test_a_kafka_section_that_is_not_json_is_named_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZDICT_KAFKA", '{"sasl.password": "s3cr3t"')
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "ZDICT_KAFKA: not valid JSON" in str(info.value)
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[codec\n", "invalid config file {path} (from --config): "),
        (b"a = " + b"[" * 100_000, "invalid config file {path} (from --config): nested too deeply"),
        (b"\xff\xfe\x00junk", "invalid config file {path} (from --config): 'utf-8' codec"),
        (b"#" * (MAX_CONFIG_BYTES + 1), "config file {path} is larger than 1024 KiB"),
    ],
    ids=["syntax", "deep", "binary", "huge"],
)
def test_a_config_file_that_is_not_settings_is_named(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "zdict.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert message.format(path=path) in str(info.value)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("{tmp}", "is a directory (from --config)"),
        ("/dev/zero", "is not a regular file (from --config)"),
        ("{tmp}/missing.toml", "does not exist (from --config)"),
    ],
)
def test_a_config_path_that_is_not_a_file_is_named(
    tmp_path: Path, where: str, message: str
) -> None:
    path = where.format(tmp=tmp_path)
    with pytest.raises(ConfigError, match=rf"config file {path} {re.escape(message)}"):
        load_settings(path)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ZDICT_CODEC__MAX_OUTPUT_SIZE", str(2**31)),
        ("ZDICT_REGISTRY__REPLICATION_FACTOR", str(2**15)),
    ],
)
def test_sizes_beyond_what_the_libraries_take_are_refused(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=rf"{var}: Input should be less than or equal to"):
        load_settings()


@pytest.mark.parametrize("name", LIBRDKAFKA_SECRETS)
def test_every_librdkafka_secret_is_kept_secret_and_redacted(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    assert is_secret_property(name)
    monkeypatch.setenv("ZDICT_KAFKA__" + name.upper().replace(".", "_"), "s3cr3t-value")
    settings = load_settings()
    assert settings.kafka.redacted() == {name: "***"}
    assert "s3cr3t-value" not in repr(settings) and "s3cr3t-value" not in str(settings)
    assert settings.kafka.as_librdkafka_dict() == {name: "s3cr3t-value"}


@pytest.mark.parametrize(
    "name", ["bootstrap.servers", "sasl.username", "sasl.mechanism", "ssl.ca.location", "acks"]
)
def test_ordinary_librdkafka_properties_are_shown(name: str) -> None:
    assert not is_secret_property(name)
    assert load_settings(kafka={name: "v"}).kafka.redacted() == {name: "v"}


def test_more_proxy_topics_than_max_topics_stops_the_start_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZDICT_PROXY__TOPICS", '["orders", "clicks", "payments"]')
    monkeypatch.setenv("ZDICT_PROXY__MAX_TOPICS", "2")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "ZDICT_PROXY__TOPICS names 3 topics, more than ZDICT_PROXY__MAX_TOPICS (2)" in str(
        info.value
    )
