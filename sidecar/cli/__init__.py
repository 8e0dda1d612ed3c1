"""The `zdict-sidecar` command line."""
