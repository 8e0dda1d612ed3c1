"""The `sampling` section: the reservoir `run` keeps per namespace for training."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SamplingSettings(BaseModel):
    """The reservoir of recent raw values `run` keeps per namespace for training."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes per namespace, values plus bookkeeping",
    )
    every: int = Field(
        default=10,
        ge=1,
        description="keep one record in this many (every record while there is no dictionary)",
    )
    min_messages: int = Field(
        default=2_000, ge=20, description="sample size before the first training"
    )
    backlog_sample: int = Field(
        default=20_000,
        ge=20,
        description="records read from a topic's backlog to train its first dictionary",
    )
    max_value_bytes: int = Field(
        default=65_536, ge=1, description="bytes; larger values are not sampled"
    )
