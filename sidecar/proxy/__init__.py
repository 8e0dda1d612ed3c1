"""`zdict-sidecar proxy`: the forwarding Kafka proxy, compressing on Produce, decoding on Fetch."""
