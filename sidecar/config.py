"""One typed settings tree for the whole process, validated at start.

Sources, highest priority first: command-line flags, environment variables (`ZDICT_` prefix,
`__` between levels: `ZDICT_CODEC__LEVEL=1`), a TOML config file (`--config FILE`), defaults.
An invalid value stops the process with a `ConfigError` naming the setting (as its environment
variable) and the expected form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sidecar.codec import DEFAULT_HEADER_KEY, DEFAULT_MAX_OUTPUT_SIZE, FrameOptions
from sidecar.dictionaries.training import (
    DEFAULT_DICT_SIZES,
    DEFAULT_LEVELS,
    DEFAULT_MIN_ENCODE_RATE,
    TrainingParams,
)
from sidecar.errors import ConfigError

ENV_PREFIX = "ZDICT_"
ENV_DELIMITER = "__"


class CodecSettings(BaseModel):
    """How values are encoded and decoded (the wire format's knobs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header_key: str = Field(
        default=DEFAULT_HEADER_KEY,
        min_length=1,
        max_length=64,
        description="record header carrying the dictionary id; every byte is paid per record",
    )
    level: int | None = Field(
        default=None, ge=-7, le=22, description="zstd level; default: the level chosen at training"
    )
    min_size: int | None = Field(
        default=None,
        ge=0,
        description="bytes; smaller values pass through (default: the measured break-even size)",
    )
    max_output_size: int = Field(
        default=DEFAULT_MAX_OUTPUT_SIZE,
        ge=1,
        description="bytes; decoded values larger than this are refused",
    )
    checksum: bool = Field(default=False, description="write zstd's 4-byte frame checksum")
    frame_dict_id: bool = Field(
        default=True, description="write the dictionary id into each frame (mismatch detection)"
    )
    content_size: bool = Field(default=True, description="write the content size into each frame")

    @property
    def frame(self) -> FrameOptions:
        return FrameOptions(
            checksum=self.checksum, dict_id=self.frame_dict_id, content_size=self.content_size
        )


class TrainingSettings(BaseModel):
    """How dictionaries are trained and chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dict_sizes: tuple[int, ...] = Field(default=DEFAULT_DICT_SIZES, min_length=1)
    levels: tuple[int, ...] = Field(default=DEFAULT_LEVELS, min_length=1)
    heldout_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    min_samples: int = Field(default=1000, ge=20)
    promotion_margin: float = Field(default=0.02, ge=0.0, lt=1.0)
    min_encode_rate: float = Field(
        default=DEFAULT_MIN_ENCODE_RATE,
        ge=0.0,
        description="messages/s one thread must encode at the chosen size and level",
    )
    grid_eval_limit: int = Field(default=4000, ge=100)

    @field_validator("dict_sizes")
    @classmethod
    def _sizes_in_range(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        for size in sizes:
            if not 256 <= size <= 1 << 20:
                raise ValueError(f"{size} is not between 256 bytes and 1 MiB")
        return sizes

    @field_validator("levels")
    @classmethod
    def _levels_in_range(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        for level in levels:
            if not -7 <= level <= 22:
                raise ValueError(f"level {level} is not between -7 and 22")
        return levels

    def params(self, codec: CodecSettings) -> TrainingParams:
        return TrainingParams(
            dict_sizes=self.dict_sizes,
            levels=self.levels,
            min_samples=self.min_samples,
            promotion_margin=self.promotion_margin,
            min_encode_rate=self.min_encode_rate,
            grid_eval_limit=self.grid_eval_limit,
            frame=codec.frame,
            header_key=codec.header_key,
        )


class Settings(BaseSettings):
    """The root of the settings tree."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        frozen=True,
        extra="forbid",
    )

    dictionaries: Path = Field(default=Path("dictionaries"), description="the local store")
    log_format: str = Field(default="auto", pattern="^(auto|json|console)$")
    log_level: str = Field(default="info", pattern="^(debug|info|warning|error)$")
    codec: CodecSettings = Field(default_factory=CodecSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)

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


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build and validate the settings; `overrides` (from CLI flags) win over everything.

    Raises:
        ConfigError: naming each invalid setting as its environment variable, with the reason.
    """
    global _config_file
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (from --config)")
        _config_file = path
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{_setting_name(err['loc'])}: {err['msg']} (got {err.get('input')!r})"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from None
    except ValueError as exc:  # a TOML syntax error
        raise ConfigError(f"invalid config file {config_file}: {exc}") from None
    finally:
        _config_file = None
