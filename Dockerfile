# syntax=docker/dockerfile:1
# The zdict-sidecar image: `docker build -t zdict-sidecar .` (deploy/docker-compose.yml builds it).
#
# Stage `build` makes a virtualenv holding the package and its dependencies, the dependencies
# installed from wheels only (zstandard and confluent-kafka publish manylinux wheels) at the
# versions deploy/constraints.txt pins, each wheel checked against the
# sha256 listed there (`make constraints`): pip refuses a file whose hash is not listed. The
# package's own wheel, built here from the source (its proxy modules compiled by mypyc, with the
# C compiler this stage installs), goes in after them without dependencies, and
# `pip check` proves the pins hold everything it needs. The final stage copies that virtualenv
# onto a fresh slim base: no compiler, no pip cache, no source tree, no pip (the venv's own is
# uninstalled once it has installed the rest: nothing installs at run time), and it runs as an
# unprivileged user.
# tests/integration/test_image.py runs the RUN steps of `build` into a fresh venv the same way.

# The base image by digest, so a rebuild gets the same one: python:3.12-slim's multi-platform
# index as docker-library/repo-info recorded it (repos/python/remote/3.12-slim.md, Python
# 3.12.13 on Debian trixie). To move on, take the new digest from there (or `docker buildx
# imagetools inspect python:3.12-slim`) and build with --build-arg PYTHON_IMAGE=...
ARG PYTHON_IMAGE=python:3.12-slim@sha256:229a2c5bfa27522db7815ea81f9bed70af17ccb9de9fc7ad142b1877b5830d36

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    VENV=/opt/zdict \
    WHEELS=/wheels
WORKDIR /src
COPY pyproject.toml README.md deploy/constraints.txt ./
COPY setup.py ./
COPY deploy/build_backend.py ./deploy/
COPY sidecar ./sidecar
# A C compiler for this stage only: the package's wheel compiles the proxy's Produce path with
# mypyc (deploy/build_backend.py). The final stage gets the compiled modules, not the compiler.
# Not pinned (DL3008): the compiler of the base's Debian release, whichever it ships; it builds,
# it is not in the image.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && python -m venv "$VENV" \
 && "$VENV/bin/pip" wheel --no-deps --wheel-dir "$WHEELS" . \
 && "$VENV/bin/pip" install --require-hashes --only-binary=:all: --no-deps --requirement constraints.txt \
 && "$VENV/bin/pip" install --no-deps --no-index "$WHEELS"/zdict_sidecar-*.whl \
 && "$VENV/bin/pip" check \
 && "$VENV/bin/python" -m pip uninstall --yes --quiet pip

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="zdict-sidecar" \
      org.opencontainers.image.description="Kafka message-compression sidecar with trained, versioned zstd dictionaries" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/zdict/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ZDICT_DICTIONARIES=/var/lib/zdict/dictionaries \
    ZDICT_LOG_FORMAT=json \
    ZDICT_METRICS__PORT=9400
# A fixed numeric uid, so Kubernetes can check runAsNonRoot without a user database.
RUN groupadd --system --gid 10001 zdict \
 && useradd --system --uid 10001 --gid zdict --home-dir /var/lib/zdict --shell /usr/sbin/nologin zdict \
 && mkdir -p /var/lib/zdict/dictionaries \
 && chown -R zdict:zdict /var/lib/zdict
COPY --from=build /opt/zdict /opt/zdict
USER 10001:10001
WORKDIR /var/lib/zdict
# The dictionary store: keep it on a volume, it holds every dictionary records may reference.
VOLUME ["/var/lib/zdict/dictionaries"]
EXPOSE 9400
# /healthz answers 200 while the relay loop's heartbeat is fresh; slim images have no curl. It is
# asked on the address the endpoint listens on (ZDICT_METRICS__HOST; 0.0.0.0 and ::: loopback),
# an IPv6 address in brackets (a pod IP on an IPv6 cluster).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; h = os.environ.get('ZDICT_METRICS__HOST') or '0.0.0.0'; h = {'0.0.0.0': '127.0.0.1', '::': '::1'}.get(h, h); urllib.request.urlopen('http://%s:%s/healthz' % ('[%s]' % h if ':' in h else h, os.environ.get('ZDICT_METRICS__PORT', '9400')), timeout=4)"]
ENTRYPOINT ["zdict-sidecar"]
# Configured from the environment (ZDICT_RELAY__INPUT_TOPICS, KAFKA_BOOTSTRAP_SERVERS, ...).
CMD ["run"]
