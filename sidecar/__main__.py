"""`python -m sidecar` is the same as the `zdict-sidecar` console script."""

from sidecar.cli.main import main

raise SystemExit(main())
