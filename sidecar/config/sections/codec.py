"""The `codec` section: how values are encoded and decoded."""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from sidecar.codec import (
    DEFAULT_HEADER_KEY,
    DEFAULT_MAX_OUTPUT_SIZE,
    DEFAULT_WIRE_FORMAT,
    FrameOptions,
    WireFormat,
)

#: `codec.output_mode`: `auto` writes raw values where batches fill past the dictionary's
#: crossover, frames elsewhere; `frames`: per-record frames always.
OutputModeSetting: TypeAlias = Literal["auto", "frames"]


class CodecSettings(BaseModel):
    """How values are encoded and decoded (the wire format's knobs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header_key: str = Field(
        default=DEFAULT_HEADER_KEY,
        min_length=1,
        max_length=64,
        description="record header carrying the dictionary id; every byte is paid per record",
    )
    wire_format: WireFormat = Field(
        default=DEFAULT_WIRE_FORMAT,
        description="compact: no frame magic or dictionary id, a 2-byte tag (9 bytes less per "
        "record); standard: what release 1 wrote, for decoders not yet upgraded",
    )
    level: int | None = Field(
        default=None, ge=-7, le=22, description="zstd level; unset: the level chosen at training"
    )
    min_size: int | None = Field(
        default=None,
        ge=0,
        description="bytes; smaller values pass through; unset: the measured break-even size",
    )
    max_output_size: int = Field(
        default=DEFAULT_MAX_OUTPUT_SIZE,
        ge=1,
        le=2**31 - 1,  # zstd takes a C size; no Kafka record comes near
        description="bytes; decoded values larger than this are refused",
    )
    checksum: bool = Field(default=False, description="write zstd's 4-byte frame checksum")
    frame_dict_id: bool = Field(
        default=True,
        description="standard frames: write the dictionary id into each frame (compact ones carry "
        "a fingerprint)",
    )
    content_size: bool = Field(default=True, description="write the content size into each frame")
    output_mode: OutputModeSetting = Field(
        default="auto",
        description="auto: per partition, raw values (no zd header) where the producer's batches "
        "fill past the dictionary's crossover, frames otherwise; frames: always",
    )

    @property
    def frame(self) -> FrameOptions:
        return FrameOptions(
            checksum=self.checksum, dict_id=self.frame_dict_id, content_size=self.content_size
        )
