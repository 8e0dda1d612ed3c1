"""The project's exception tree: every expected failure is a `ZdictError`.

Callers (the CLI, the relay) catch `ZdictError` and print its message, which names the cause and,
where there is one, what to do about it. Anything else escaping is a bug.
"""


class ZdictError(Exception):
    """Root of every expected zdict-sidecar failure."""


class ConfigError(ZdictError):
    """A setting is missing or malformed; the message names the setting and the expected form."""


class InputError(ZdictError):
    """Input the user pointed us at is missing, empty or unreadable."""


class CodecError(ZdictError):
    """A value could not be encoded or decoded."""


class UnknownDictionary(CodecError):
    """A record references a dictionary id that no loaded store or registry has."""


class CorruptFrame(CodecError):
    """A value tagged as compressed is not a valid zstd frame for its dictionary."""


class OutputTooLarge(CodecError):
    """A frame would decompress past the configured output limit (a decompression bomb guard)."""


class DecodeLimitReached(OutputTooLarge):
    """A frame would decompress past the bound one call was given, below the configured output
    limit: the caller's budget for the work is spent, the value itself may be sound."""


class StoreError(ZdictError):
    """The dictionary store cannot be read or written."""


class DictionaryIntegrityError(StoreError):
    """A dictionary file does not match its metadata (sha256, size, id) or is not a dictionary."""


class DictionaryNotFound(StoreError):
    """A namespace or dictionary id is not in the store."""


class TrainingError(ZdictError):
    """Training could not produce a usable dictionary (too few or unsuitable samples)."""


class RegistryError(ZdictError):
    """The registry topic refused an entry or holds one that contradicts this one."""


class RecordIgnored(RegistryError):
    """A registry record no reader applies; `kind` classes why (one of the registry's
    `IGNORED_REASONS`), the message says it in words."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


class NamespacePinned(RegistryError):
    """An operator pinned the namespace's active dictionary: no training replaces it until
    `dicts unpin`."""


class RegistryUnavailable(RegistryError):
    """The registry topic could not be read or written within the configured timeout."""


class KafkaUnavailable(ZdictError):
    """The cluster cannot be reached, or refused us (authentication, authorisation)."""


class TopicMissing(ZdictError):
    """An input or output topic does not exist."""


class Interrupted(ZdictError):
    """SIGTERM or SIGINT came before the work began: nothing to finish, the process exits 0."""


class RelayFailed(ZdictError):
    """The relay cannot go on without risking loss; it stopped after committing what is safe."""


class ClientHung(RelayFailed):
    """A Kafka client call blocked past any timeout of its own: the client is unusable."""


class TransactionHung(ClientHung):
    """A transactional call blocked past its timeout: the producer cannot be used any more."""


class RecordTooLarge(ZdictError):
    """A record would exceed what the output topic (or the producer) accepts."""


class MissingDependency(ConfigError):
    """An optional dependency a command needs is not installed (the message names the extra)."""


class MalformedBatch(ZdictError):
    """A Kafka record batch a client sent does not parse: truncated, a bad CRC, an unknown or
    unsupported compression codec, or larger than allowed once decompressed. `reason` classes
    it (`corrupt`: CRC, `codec`: a codec the proxy cannot decode, `format`: the rest)."""

    def __init__(self, message: str, reason: str = "format") -> None:
        super().__init__(message)
        self.reason = reason


class ProtocolError(ZdictError):
    """A Kafka protocol request the proxy cannot serve: a malformed frame, an API key or
    version it does not implement; the connection is closed after it is logged."""


class AuthenticationFailed(KafkaUnavailable):
    """A broker refused the SASL authentication of the proxy's upstream connection;
    the message carries the broker's own error message."""


class ProduceRefused(ZdictError):
    """The proxy refuses a Produce request at the door: `code` is the Kafka error
    code the client gets, `kind` a bounded name of why (a log and metrics key), the message
    says it in words."""

    def __init__(self, code: int, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.kind = kind


class FetchHeldBack(ZdictError):
    """A fetched record batch the proxy cannot send decoded now: no room is left
    for it in the response. Its partition's records end before it; the client fetches it
    again (a response's first batch is sent as stored instead)."""


class FetchDictionaryUnavailable(FetchHeldBack):
    """A fetched record batch naming a dictionary that could not be looked up (the registry
    did not answer): held back even as a response's first batch."""
