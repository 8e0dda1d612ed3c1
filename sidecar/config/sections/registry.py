"""The `registry` section: the registry topic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RegistrySettings(BaseModel):
    """The registry topic: every dictionary and activation, the source of truth across hosts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True, description="false: the local store alone (one host, offline)"
    )
    topic: str = Field(
        default="_zdict_dictionaries",
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="the registry topic (compacted), shared by every sidecar",
    )
    create: bool = Field(default=True, description="create the topic (compacted) when missing")
    replication_factor: int = Field(
        default=-1, ge=-1, le=32767, description="for a created topic; -1: the broker's default"
    )
    timeout: float = Field(
        default=30.0, gt=0.0, le=600.0, description="seconds a publish or a read may take"
    )
    follow_interval: float = Field(
        default=5.0, gt=0.0, le=300.0, description="seconds between reads of new entries"
    )
    cache_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        le=2**40,
        description="bytes of dictionaries a reader keeps beyond those in use (others are read "
        "again when a record names them)",
    )
