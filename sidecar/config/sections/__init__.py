"""The sections of the settings tree, one module each: `codec`, `training`, `sampling`,
`registry`, `kafka` (librdkafka properties), `relay`, `proxy`, `metrics` (`settings.Settings`
is their root); here, what the root itself holds and how the environment names settings."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

ENV_PREFIX = "ZDICT_"
ENV_DELIMITER = "__"
#: Bytes a `--config` file may have: a settings file is a few KiB.
MAX_CONFIG_BYTES: Final = 1024 * 1024

#: `log_format`: `auto` is console on a terminal, JSON lines otherwise.
LogFormat: TypeAlias = Literal["auto", "json", "console"]
LogLevel: TypeAlias = Literal["debug", "info", "warning", "error"]
