"""The `relay` section: the consume → encode → produce → commit loop."""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Output topic of `run --mode decode` unless one is given.
DEFAULT_DECODED_TOPIC = "{topic}.decoded"

#: `relay.mode`: compress input topics, or decode compressed ones.
RelayMode: TypeAlias = Literal["encode", "decode"]
#: `relay.guarantee`: offsets committed after delivery, or Kafka transactions.
Guarantee: TypeAlias = Literal["at-least-once", "exactly-once"]
#: A producer's batch codec (`compression.type`), as Kafka names them.
BatchCodec: TypeAlias = Literal["none", "gzip", "snappy", "lz4", "zstd"]


class RelaySettings(BaseModel):
    """The consume → encode → produce → commit loop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_topics: tuple[str, ...] = Field(default=(), description="input topics, a JSON list")
    output_topic: str = Field(
        default="{topic}.zd", description="output topic; {topic} is replaced by the input topic"
    )
    group_id: str = Field(default="zdict-sidecar", min_length=1, description="consumer group")
    mode: RelayMode = Field(
        default="encode",
        description="decode: compressed topics back to plain values, by default into "
        "{topic}.decoded",
    )
    create_topics: bool = Field(default=False, description="create missing output topics")
    batch_size: int = Field(default=1000, ge=1, le=100_000, description="records per consume()")
    poll_timeout: float = Field(default=0.5, gt=0.0, le=10.0, description="seconds")
    commit_interval: float = Field(
        default=1.0, gt=0.0, le=60.0, description="seconds between offset commits"
    )
    unreachable_timeout: float = Field(
        default=60.0, gt=0.0, description="seconds without a broker before exiting non-zero"
    )
    backlog_wait: float = Field(
        default=60.0,
        ge=0.0,
        description="seconds a backlog waits for its first dictionary (trained from it) before "
        "it is relayed anyway; 0: never wait",
    )
    workers: int = Field(default=1, ge=1, le=64, description="processes in the consumer group")
    input_compression: BatchCodec = Field(
        default="none",
        description="the compression.type of the input topics' producers (none: the clients' "
        "default): what the saving is counted against",
    )
    compress: bool = Field(
        default=True, description="false: pass every record through, a cost baseline"
    )
    dead_letter_topic: str | None = Field(
        default=None,
        min_length=1,
        description="records that cannot be processed go here ({topic}: the input's); "
        "unset: the relay stops at them",
    )
    guarantee: Guarantee = Field(
        default="at-least-once",
        description="exactly-once: Kafka transactions; consumers must read read_committed",
    )
    transaction_records: int = Field(
        default=10_000,
        ge=1,
        description="exactly-once: commit the transaction after this many records",
    )
    transactional_id: str | None = Field(
        default=None,
        min_length=1,
        description="exactly-once: stable per worker; unset: zdict-<group>-<host>-<worker>",
    )
    worker_index: int = Field(
        default=0, ge=0, description="set by --workers for each worker process"
    )

    @field_validator("output_topic")
    @classmethod
    def _output_differs(cls, value: str) -> str:
        if value.strip() in {"", "{topic}"}:
            raise ValueError("the output topic must differ from the input topic")
        return value

    def transactional_id_for(self, host: str) -> str:
        """This worker's transactional.id: stable, so a restart fences its predecessor."""
        if self.transactional_id is not None:
            return self.transactional_id
        return f"zdict-{self.group_id}-{host}-{self.worker_index}"

    def dead_letter_for(self, topic: str) -> str | None:
        """The dead-letter topic of input `topic`, None when records are not set aside."""
        if self.dead_letter_topic is None:
            return None
        return self.dead_letter_topic.replace("{topic}", topic)

    def output_for(self, topic: str, *, decode: bool = False) -> str:
        """The output topic of `topic`; decoding, the default template is `{topic}.decoded`."""
        template = self.output_topic
        if decode and "output_topic" not in self.model_fields_set:
            template = DEFAULT_DECODED_TOPIC
        return template.replace("{topic}", topic)
