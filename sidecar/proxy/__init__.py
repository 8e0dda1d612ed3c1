"""`zdict-sidecar proxy`: a Kafka-protocol produce proxy that compresses records one by one."""
