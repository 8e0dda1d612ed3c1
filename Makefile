# The two commands a newcomer runs: `make demo` and `make test`. Both work on a fresh machine:
# they create .venv, install the package, and install Debian's zstd, kcat and prometheus (with
# promtool) when they are missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
OUT    := out
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo evaluate test lint unit integration soak bench bench-relay-large bench-clients bench-lifecycle bench-registry tools dashboard image clean

# The modules deploy/build_backend.py compiles with mypyc: the editable install builds them in
# place, so an edit to one of them installs again (the tests refuse a stale build).
COMPILED := $(shell grep -o '"sidecar/[a-z_/]*\.py"' deploy/build_backend.py | tr -d '"')

$(STAMP): pyproject.toml deploy/build_backend.py $(COMPILED)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

# Debian tools the tests use as independent peers, installed only when missing: the reference zstd
# CLI (interop decoding), kcat (a Kafka client that is not ours), and prometheus with promtool
# (the monitoring tests run a real Prometheus); and Debian's kafka-python (python3-kafka, run by
# the system's Python: a consumer without zstd).
# And the Docker CLI's Compose plugin (the real `docker compose config` merges the Compose drop-in
# over a foreign service in tests/deploy; it needs no engine): built from its Go module when
# missing, in a module of its own (`go install` refuses it: its go.mod has exclude directives),
# about 1.5 CPU-minutes once.
TOOLS := zstd kcat prometheus promtool
COMPOSE_VERSION := v5.6.0
COMPOSE_PLUGIN  := $(HOME)/.docker/cli-plugins/docker-compose
tools:
	@missing=""; for t in $(TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	/usr/bin/python3 -c "import kafka" 2>/dev/null || missing="$$missing python3-kafka"; \
	if [ -n "$$missing" ]; then \
		packages=$$(echo $$missing | sed 's/promtool/prometheus/' | tr ' ' '\n' | sort -u); \
		$(SUDO) apt-get update -qq && $(APT_INSTALL) $$packages >/dev/null; \
	fi
	@docker compose version >/dev/null 2>&1 || { \
		mkdir -p $(dir $(COMPOSE_PLUGIN)) && rm -rf $(OUT)/compose-plugin \
		&& mkdir -p $(OUT)/compose-plugin && cd $(OUT)/compose-plugin \
		&& go mod init zdict-sidecar/compose-plugin >/dev/null 2>&1 \
		&& go get github.com/docker/compose/v5/cmd@$(COMPOSE_VERSION) >/dev/null 2>&1 \
		&& go build -trimpath -o $(COMPOSE_PLUGIN) \
			-ldflags "-s -w -X github.com/docker/compose/v5/internal.Version=$(COMPOSE_VERSION)" \
			github.com/docker/compose/v5/cmd; }

## reference: sidecar/REFERENCE.md, every setting and every metric, generated from their code (a
## test fails while the committed page differs)
.PHONY: reference
reference: $(STAMP)
	$(BIN)/python -m deploy.reference --out sidecar/REFERENCE.md

## dashboard: regenerate the Grafana dashboard and the Kubernetes PrometheusRule from their code
dashboard: $(STAMP)
	$(BIN)/python -m deploy.monitoring

## demo: a local broker, about two minutes: the same events three ways (no compression, producer
## zstd, through the proxy), stored bytes from the broker's segments, small batches then full ones
demo: $(STAMP)
	deploy/kafka/kafka-local exec -- $(BIN)/zdict-sidecar demo

## evaluate: the offline path: generate events, measure what a dictionary saves, train and store one
evaluate: $(STAMP)
	@mkdir -p $(OUT)
	$(BIN)/zdict-sidecar generate --kind product_viewed -n 100000 --seed 1 > $(OUT)/demo-events.ndjson
	$(BIN)/zdict-sidecar evaluate $(OUT)/demo-events.ndjson
	$(BIN)/zdict-sidecar train --input $(OUT)/demo-events.ndjson --namespace demo --dictionaries $(OUT)/dictionaries
	$(BIN)/zdict-sidecar dicts list --dictionaries $(OUT)/dictionaries

## test: lint, type-check, then every test; the integration tests get a real Kafka broker:
## KAFKA_BOOTSTRAP_SERVERS if set, else deploy/kafka/kafka-local starts one and stops it after.
## Property tests run every example they name (the thorough hypothesis profile).
## The proxy's unit tests run once more on the sources of the modules mypyc compiles
## (ZDICT_PURE_PYTHON, tests/compiled.py): the code a build without a C compiler runs.
test: $(STAMP) tools lint
	HYPOTHESIS_PROFILE=thorough deploy/kafka/kafka-local exec -- $(BIN)/pytest -q
	ZDICT_PURE_PYTHON=1 $(BIN)/pytest -q tests/unit/test_forward_*.py tests/unit/test_proxy_filters.py tests/deploy/test_build_backend.py

## soak: the fault tests at 1,000,000 records (ZDICT_SOAK=1): ten kill -9, storm, stall, queue
soak: $(STAMP) tools
	ZDICT_SOAK=1 deploy/kafka/kafka-local exec -- $(BIN)/pytest -q -s tests/integration/test_faults.py

integration: $(STAMP) tools
	deploy/kafka/kafka-local exec -- $(BIN)/pytest -q tests/integration

# Python scripts without a .py suffix, which neither tool finds in a directory on its own; mypy
# checks them in a run of their own (paths on its command line replace pyproject's packages).
SCRIPTS := deploy/kafka/kafka-local

# The layers (tests/unit/test_architecture.py, LAYERS) and the absence of import cycles are part
# of the lint: an import against them fails it (the module's other checks run with the tests).
lint: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_architecture.py -k "layer or cycles"
	$(BIN)/ruff check sidecar tests deploy $(SCRIPTS)
	$(BIN)/ruff format --check sidecar tests deploy $(SCRIPTS)
	$(BIN)/mypy
	$(BIN)/mypy $(SCRIPTS)

## bench: the standard benchmarks in under 15 minutes (tables on stdout, JSON and PNGs in out/):
## the codec, the wire format and the dictionary choice on this machine's real corpora offline,
## then on the local broker the bytes it stores (its segments, its CPU) and the relay on
## 1,000,000 ~100-byte events
KAFKA_RUN := deploy/kafka/.cache/run
bench: $(STAMP) tools
	$(BIN)/zdict-sidecar bench codec
	$(BIN)/zdict-sidecar bench wire
	$(BIN)/zdict-sidecar bench choice
	deploy/kafka/kafka-local exec -- sh -c '\
		$(BIN)/zdict-sidecar bench storage --data-dir $(KAFKA_RUN)/data \
			--broker-pid-file $(KAFKA_RUN)/kafka.pid && \
		$(BIN)/zdict-sidecar bench relay --kind product_viewed'

## bench-relay-large: the relay on 1,000,000 ~500-byte events (about 10 minutes more)
bench-relay-large: $(STAMP)
	deploy/kafka/kafka-local exec -- $(BIN)/zdict-sidecar bench relay --kind order \
		--json-out $(OUT)/bench-relay-order.json --png $(OUT)/bench-relay-order.png

## bench-clients: compressing before the broker, next to a plain producer in the same run: the
## in-process producer (µs added to produce(), bytes stored) and the proxy (zdict-sidecar proxy)
bench-clients: $(STAMP)
	deploy/kafka/kafka-local exec -- sh -c '\
		$(BIN)/zdict-sidecar bench producer --json-out $(OUT)/bench-producer.json && \
		$(BIN)/zdict-sidecar bench proxy --data-dir $(KAFKA_RUN)/data \
			--broker-pid-file $(KAFKA_RUN)/kafka.pid --json-out $(OUT)/bench-proxy.json'

## bench-lifecycle: drift → retrain → recovery, and the relay's speed while training (JSON + PNG)
bench-lifecycle: $(STAMP)
	deploy/kafka/kafka-local exec -- $(BIN)/zdict-sidecar bench lifecycle

## bench-registry: a registry reader's start (proxy, consumer, dicts list) at 100, 1,000 and
## 10,000 dictionaries of 64 KiB across 100 namespaces (about 8 minutes)
bench-registry: $(STAMP)
	deploy/kafka/kafka-local exec -- $(BIN)/zdict-sidecar bench registry

## figures: sidecar/bench/FIGURES.md, every measured figure, from the benchmarks' JSON in out/: run
## it after the benchmarks in the checkout that ran them (the page names the commit it was rendered at)
.PHONY: figures
figures: $(STAMP)
	$(BIN)/python -m sidecar.bench.figures --out sidecar/bench/FIGURES.md \
		--commit "$$(git describe --always --dirty 2>/dev/null || echo unknown)" $(wildcard $(OUT)/bench-*.json)

## apidocs: the API reference of the library an application imports (sidecar.serde, sidecar.codec),
## HTML from the docstrings and type hints, in out/apidocs (not committed)
.PHONY: apidocs
apidocs: $(STAMP)
	$(BIN)/pdoc --output-directory $(OUT)/apidocs sidecar.serde sidecar.codec

## constraints: deploy/constraints.txt, the image's dependency pins with the sha256 of each wheel
## the image may install (from the index), written from this venv's versions: after changing one
.PHONY: constraints
constraints: $(STAMP)
	$(BIN)/python -m deploy.constraints

## unit: the broker-free tests (tests/unit, tests/deploy) but the slow ones, each property test
## capped at 100 examples: a quick check while working; `make test` runs every test in full
unit: $(STAMP) tools
	$(BIN)/pytest -q -m "not slow" tests/unit tests/deploy

## image: build the image for your cluster and push it, in one command (Docker with buildx):
## `make image REGISTRY=registry.example.com/team` pushes $(REGISTRY)/zdict-sidecar:<version> for
## PLATFORM (default linux/amd64, whatever this machine is); put that name and tag under
## `images:` in deploy/k8s/kustomization.yaml. The Dockerfile's build stage brings its compiler.
REGISTRY ?=
PLATFORM ?= linux/amd64
TAG      ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	@test -n "$(REGISTRY)" || { echo "make image: set REGISTRY, e.g. make image REGISTRY=registry.example.com/team" >&2; exit 2; }
	docker buildx build --platform $(PLATFORM) --file Dockerfile \
		--tag $(REGISTRY)/zdict-sidecar:$(TAG) --push .

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache .hypothesis
