"""The forwarding Kafka proxy (`zdict-sidecar proxy`): every request passed to the
upstream broker the client addressed, broker addresses rewritten to the proxy's own listeners,
Produce requests compressed in place and Fetch responses decoded."""
