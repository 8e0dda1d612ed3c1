"""The codec: per-record zstd compression with a dictionary, and its wire format.

Pure: no Kafka, no files, no threads of its own. Producers that compress in-process and consumers
import this package; the relay is a loop around `Encoder.encode_batch`, and the in-process
producers call `Encoder.encode_value` once per record.

* `wire`: the wire format itself (header, tags, frames), readable on its own.
* `encoder`: `Encoder`, the skip rules and compression.
* `decoder`: `Decoder`, bounded on untrusted input, and where it finds dictionaries.
* `results`: what both report per record (`Transformed`, `Outcome`) and an encoder in total
  (`CodecStats`).
* `precompressed`: values compressed already, told by their magic number.
"""

from sidecar.codec.decoder import (
    DEFAULT_MAX_OUTPUT_SIZE,
    Decoder,
    DictionaryResolver,
    StaticResolver,
)
from sidecar.codec.encoder import BATCH_API_MIN, Encoder, FrameOptions
from sidecar.codec.precompressed import looks_compressed
from sidecar.codec.results import CodecStats, Outcome, Transformed
from sidecar.codec.wire import (
    DEFAULT_HEADER_KEY,
    DEFAULT_WIRE_FORMAT,
    NO_DICTIONARY,
    ZSTD_MAGIC,
    Tag,
    WireFormat,
    fingerprint,
    header_cost,
    header_dict_id,
    header_tag,
    parse_tag,
    standard_frame,
    tag_value,
)

__all__ = [
    "BATCH_API_MIN",
    "DEFAULT_HEADER_KEY",
    "DEFAULT_MAX_OUTPUT_SIZE",
    "DEFAULT_WIRE_FORMAT",
    "NO_DICTIONARY",
    "ZSTD_MAGIC",
    "CodecStats",
    "Decoder",
    "DictionaryResolver",
    "Encoder",
    "FrameOptions",
    "Outcome",
    "StaticResolver",
    "Tag",
    "Transformed",
    "WireFormat",
    "fingerprint",
    "header_cost",
    "header_dict_id",
    "header_tag",
    "looks_compressed",
    "parse_tag",
    "standard_frame",
    "tag_value",
]
