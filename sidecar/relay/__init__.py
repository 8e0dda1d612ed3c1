"""The relay: consume → encode (or decode) → produce → commit, at least once or exactly once."""
