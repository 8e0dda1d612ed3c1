"""Kafka's wire formats, pure: no Kafka client, no I/O, nothing imported here.

`varint`: the protocol's unsigned varints and the record format's zig-zag varints, read and
written. `record_batch`: the v2 record batch (KIP-98), its 61-byte header as named offsets and
structs, and its records written and read as Kafka lays them out. The proxy, the size models of
training and the benchmarks, and the codec's header cost read these; the tests read batches
back with a reference reader of their own (tests/record_batches.py).
"""
