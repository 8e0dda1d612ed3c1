"""The root of the settings tree (`Settings`) and its sources, `load_settings` with its error
messages (each names the setting as its environment variable), and the environment's help text
(`environment_help`, for `--help`)."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from sidecar.config.sections import (
    ENV_DELIMITER,
    ENV_PREFIX,
    MAX_CONFIG_BYTES,
    LogFormat,
    LogLevel,
)
from sidecar.config.sections.codec import CodecSettings
from sidecar.config.sections.kafka import KafkaSettings
from sidecar.config.sections.metrics import MetricsSettings
from sidecar.config.sections.proxy import REMOVED_SETTINGS, ProxySettings
from sidecar.config.sections.registry import RegistrySettings
from sidecar.config.sections.relay import RelaySettings
from sidecar.config.sections.sampling import SamplingSettings
from sidecar.config.sections.training import TrainingSettings
from sidecar.errors import ConfigError


class Settings(BaseSettings):
    """The root of the settings tree."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        frozen=True,
        extra="forbid",
    )

    dictionaries: Path = Field(
        default=Path("dictionaries"),
        description="the local dictionary store, a cache of the registry",
    )
    log_format: LogFormat = Field(
        default="auto", description="auto: console on a terminal, JSON lines otherwise"
    )
    log_level: LogLevel = Field(default="info", description="the least severe level logged")
    codec: CodecSettings = Field(default_factory=CodecSettings, description="the wire format")
    training: TrainingSettings = Field(
        default_factory=TrainingSettings, description="training and choosing dictionaries"
    )
    kafka: KafkaSettings = Field(
        default_factory=KafkaSettings,
        description="any librdkafka property, '_' for '.' (e.g. ZDICT_KAFKA__SASL_PASSWORD; "
        "secrets are never logged)",
    )
    consumer: KafkaSettings = Field(
        default_factory=KafkaSettings, description="consumer-only librdkafka properties"
    )
    producer: KafkaSettings = Field(
        default_factory=KafkaSettings, description="producer-only librdkafka properties"
    )
    relay: RelaySettings = Field(
        default_factory=RelaySettings, description="the consume, encode, produce, commit loop"
    )
    metrics: MetricsSettings = Field(
        default_factory=MetricsSettings, description="the /metrics, /healthz, /readyz endpoint"
    )
    sampling: SamplingSettings = Field(
        default_factory=SamplingSettings, description="the training reservoir of `run`"
    )
    registry: RegistrySettings = Field(
        default_factory=RegistrySettings, description="the registry topic"
    )
    proxy: ProxySettings = Field(
        default_factory=ProxySettings, description="the proxy (`zdict-sidecar proxy`)"
    )

    @model_validator(mode="after")
    def _sample_fits_training(self) -> Settings:
        if self.sampling.min_messages < self.training.min_samples:
            raise ValueError(
                f"ZDICT_SAMPLING__MIN_MESSAGES ({self.sampling.min_messages}) is below "
                f"ZDICT_TRAINING__MIN_SAMPLES ({self.training.min_samples}): the first training "
                "would fail for too few samples"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if _config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=_config_file))
        return tuple(sources)


# The config file path for the one `load_settings` call in progress: pydantic-settings asks for
# sources through a classmethod, so there is no instance to carry it.
_config_file: Path | None = None


def _setting_name(loc: tuple[int | str, ...]) -> str:
    return ENV_PREFIX + ENV_DELIMITER.join(str(part).upper() for part in loc)


#: Sections whose values are never echoed in an error: they may hold credentials.
_UNECHOED: Final = frozenset({"kafka", "consumer", "producer"})


def _describe(err: Any) -> str:
    loc = tuple(err["loc"])
    if not loc:  # a check across settings: its message names them
        return str(err["msg"]).removeprefix("Value error, ")
    message = err["msg"]
    removed = REMOVED_SETTINGS.get(tuple(map(str, loc)))
    if err["type"] == "extra_forbidden" and removed is not None:
        message = f"no longer a setting ({removed}): remove it"
    text = f"{_setting_name(loc)}: {message}"
    if _config_file is not None:
        dotted = ".".join(map(str, loc))
        text = f"{_setting_name(loc)} (or {dotted} in {_config_file}): {message}"
    if loc[0] not in _UNECHOED:
        text += f" (got {err.get('input')!r})"
    return text


def _wants_json(name: str) -> bool:
    """True when environment variable `name` sets a list or a section: its value is JSON."""
    model: type[BaseModel] | None = Settings
    annotation: Any = None
    for part in name.upper().removeprefix(ENV_PREFIX).lower().split(ENV_DELIMITER):
        info = model.model_fields.get(part) if model is not None else None
        if info is None:
            return False
        annotation = info.annotation
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        # A librdkafka section's properties are plain strings: only the section itself is JSON.
        model = annotation if nested and annotation is not KafkaSettings else None
    origin = get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, BaseModel | tuple | list | dict)


def _unparsable_variables() -> str:
    """The ZDICT_* variables whose value is not the JSON they must hold, named, with the
    parser's reason; empty when there is none."""
    problems = []
    for name, value in sorted(os.environ.items()):
        if not name.upper().startswith(ENV_PREFIX) or not _wants_json(name):
            continue
        try:
            json.loads(value)
        except (ValueError, RecursionError) as err:
            reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
            section = name.upper().removeprefix(ENV_PREFIX).split(ENV_DELIMITER)[0].lower()
            shown = "" if section in _UNECHOED else f" (got {value[:80]!r})"
            problems.append(
                f"{name}: not valid JSON: {reason}{shown}; lists are written like "
                '["a", "b"], sections like {"key": "value"}'
            )
    return "; ".join(problems)


def _check_config_file(path: Path) -> None:
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory (from --config); give a TOML file")
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist (from --config)")
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a regular file (from --config)")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {path} is larger than {MAX_CONFIG_BYTES // 1024} KiB (from --config): "
            "is it the settings file?"
        )


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build and validate the settings; `overrides` (from CLI flags) win over everything.

    Raises:
        ConfigError: naming each invalid setting as its environment variable, with the reason.
    """
    global _config_file
    if config_file is not None:
        path = Path(config_file)
        _check_config_file(path)
        _config_file = path
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from None
    except (SettingsError, RecursionError) as exc:
        # A ZDICT_* variable that must be JSON is not (pydantic-settings names only its
        # section), or JSON or TOML nested past Python's recursion limit.
        problems = _unparsable_variables()
        if problems:
            raise ConfigError(f"invalid configuration: {problems}") from None
        if isinstance(exc, SettingsError) or config_file is None:
            raise ConfigError(f"invalid configuration: {exc}") from None
        raise ConfigError(
            f"invalid config file {config_file} (from --config): nested too deeply"
        ) from None
    except ValueError as exc:  # TOML syntax, or a file that is not UTF-8 text
        raise ConfigError(f"invalid config file {config_file} (from --config): {exc}") from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read config file {config_file} (from --config): {exc.strerror or exc}"
        ) from None
    finally:
        _config_file = None


# -- environment help ----------------------------------------------------------------------------

#: Read from the environment although no setting is named after it.
_PLAIN_VARIABLES: Final = (
    (
        "KAFKA_BOOTSTRAP_SERVERS",
        "used when ZDICT_KAFKA__BOOTSTRAP_SERVERS is not set; one of the two is required",
    ),
)


def environment_variables() -> list[tuple[str, str]]:
    """Every environment variable the settings read, as (name, help), in the model's order.

    A leaf setting's help is its description, its choices (Literal settings) and its default
    (a setting unset by default says in its description what unset means); a librdkafka
    pass-through section (`KafkaSettings`) is one `ZDICT_<SECTION>__<PROPERTY>` entry.
    """
    return [*_model_variables(Settings, ENV_PREFIX), *_PLAIN_VARIABLES]


def environment_help(width: int = 100) -> str:
    """`environment_variables()` as a help section of `width` columns: names in a column,
    help wrapped beside them (never inside a hyphenated word: `at-least-once`)."""
    variables = environment_variables()
    column = 2 + max(len(name) for name, _ in variables) + 2
    lines = ["environment (every setting has one; see the README, Configuration):"]
    for name, text in variables:
        wrapped = textwrap.wrap(text, max(width - column, 30), break_on_hyphens=False) or [""]
        lines.append(f"  {name:<{column - 2}}{wrapped[0]}")
        lines += [" " * column + more for more in wrapped[1:]]
    return "\n".join(lines) + "\n"


def _model_variables(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str]]:
    for name, info in model.model_fields.items():
        variable = prefix + name.upper()
        annotation = info.annotation
        if annotation is KafkaSettings:  # free-form: librdkafka's property names
            yield f"{variable}{ENV_DELIMITER}<PROPERTY>", info.description or ""
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _model_variables(annotation, variable + ENV_DELIMITER)
        else:
            yield variable, _field_help(info)


def _field_help(info: FieldInfo) -> str:
    description = info.description or ""
    value = info.get_default(call_default_factory=True)
    if value is None:
        return description
    default = f"default {_default_text(value)}"
    if get_origin(info.annotation) is Literal:
        default = "|".join(str(choice) for choice in get_args(info.annotation)) + ", " + default
    return f"{description} ({default})" if description else default


def _default_text(value: object) -> str:
    """A default as it would be written in the environment."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return json.dumps(list(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 3600, not 3600.0
    return str(value)
