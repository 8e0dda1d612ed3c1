"""The `metrics` section: the /metrics, /healthz and /readyz endpoint."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MetricsSettings(BaseModel):
    """The /metrics, /healthz and /readyz endpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="0.0.0.0", description="address the endpoint listens on")
    port: int = Field(default=9400, ge=0, le=65535, description="0 picks a free port")
    enabled: bool = Field(default=True, description="false: no endpoint")
