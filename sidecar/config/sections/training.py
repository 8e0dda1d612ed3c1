"""The `training` section: how dictionaries are trained and chosen."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sidecar.config.sections.codec import CodecSettings
from sidecar.training.params import (
    DEFAULT_BATCH_LEVEL_BUDGET_US,
    DEFAULT_BUDGET_MB_PER_S,
    DEFAULT_BUDGET_US_PER_MESSAGE,
    DEFAULT_DICT_SIZES,
    DEFAULT_HELDOUT_FRACTION,
    DEFAULT_LEVELS,
    DEFAULT_MIN_HELDOUT,
    DEFAULT_MIN_SAMPLES,
    TrainingParams,
)


class TrainingSettings(BaseModel):
    """How dictionaries are trained and chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dict_sizes: tuple[int, ...] = Field(
        default=DEFAULT_DICT_SIZES, min_length=1, description="dictionary sizes tried, bytes"
    )
    levels: tuple[int, ...] = Field(
        default=DEFAULT_LEVELS, min_length=1, description="zstd levels tried"
    )
    heldout_fraction: float = Field(
        default=DEFAULT_HELDOUT_FRACTION,
        gt=0.0,
        lt=1.0,
        description="newest share of the sample (per partition) kept out of training to measure "
        "the candidates",
    )
    min_samples: int = Field(
        default=DEFAULT_MIN_SAMPLES,
        ge=20,
        description="fewer usable samples and no training is attempted",
    )
    min_heldout: int = Field(
        default=DEFAULT_MIN_HELDOUT,
        ge=1,
        description="fewer held-out samples and no dictionary is promoted (measured: python -m "
        "sidecar.bench.heldout)",
    )
    promotion_margin: float = Field(
        default=0.02,
        ge=0.0,
        lt=1.0,
        description="a new dictionary must produce this fraction fewer bytes than the active one",
    )
    budget_us_per_message: float = Field(
        default=DEFAULT_BUDGET_US_PER_MESSAGE,
        ge=0.0,
        description="CPU budget of one message's encoding, µs, plus its bytes at budget_mb_per_s",
    )
    budget_mb_per_s: float = Field(
        default=DEFAULT_BUDGET_MB_PER_S,
        ge=0.0,
        description="the per-byte part of the CPU budget, as MB/s of input on one core",
    )
    batch_level_budget_us: float = Field(
        default=DEFAULT_BATCH_LEVEL_BUDGET_US,
        ge=0.0,
        description="extra CPU per record, µs, the producer's batch codec may take over zstd "
        "level 3 where raw values are written (0: no budget)",
    )
    grid_eval_limit: int = Field(
        default=4000,
        ge=100,
        description="held-out values the size x level grid is measured on; the pick: on all",
    )
    scrub: tuple[str, ...] = Field(
        default=(),
        description="regular expressions removed from training samples only, for privacy",
    )
    # When `run` trains (one trainer per namespace across the consumer group):
    enabled: bool = Field(
        default=True,
        description="false: never train in this process; it still follows the registry",
    )
    retrain_interval: float = Field(
        default=3600.0, gt=0.0, description="seconds between scheduled training runs"
    )
    min_interval: float = Field(
        default=60.0,
        ge=0.0,
        description="seconds between two runs of one namespace, and before a retry",
    )
    drift_tolerance: float = Field(
        default=0.1,
        gt=0.0,
        lt=1.0,
        description="retrain early when the live ratio is this fraction below the held-out one",
    )
    drift_window: float = Field(
        default=300.0, gt=0.0, description="seconds of traffic the live ratio is measured over"
    )
    drift_min_messages: int = Field(
        default=5000, ge=1, description="messages the window must hold to judge drift"
    )
    retire: Literal["off", "dry-run", "apply"] = Field(
        default="off",
        description="after train --configured-topics --publish: list (dry-run) or retire "
        "(apply) the dictionaries no record of the configured topics can name any more, as "
        "dicts retire does",
    )
    nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="niceness of the training process, so the relay comes first",
    )

    @field_validator("scrub")
    @classmethod
    def _scrub_compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern.encode())
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns

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
            min_heldout=self.min_heldout,
            promotion_margin=self.promotion_margin,
            budget_us_per_message=self.budget_us_per_message,
            budget_mb_per_s=self.budget_mb_per_s,
            grid_eval_limit=self.grid_eval_limit,
            batch_level_budget_us=self.batch_level_budget_us,
            frame=codec.frame,
            wire=codec.wire_format,
            header_key=codec.header_key,
            scrub=self.scrub,
        )
