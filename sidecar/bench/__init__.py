"""Evidence, not product: benchmarks, the demo, and the synthetic events they run on."""
