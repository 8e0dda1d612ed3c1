"""Every subcommand, run as a real process (`python -m sidecar ...`), with bad input: bad numbers,
missing files, directories, binary junk, /dev/zero where a file is read, unknown flags, bad
environment variables, bad --config files, and an unreachable broker (port 1 of the loopback,
with one-second timeouts) for the commands that need Kafka.

Each case asserts: no traceback on stderr, exit 2 for bad usage or configuration and 1 for an
expected failure, and a stderr that names the flag, variable, file or address at fault. The
processes run in parallel, once per session; each case is then one test of its own.
"""

from __future__ import annotations

import http.server
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

import pytest

#: Nothing listens on port 1 of the loopback: connections are refused at once.
UNREACHABLE: Final = "127.0.0.1:1"
#: Seconds any one command may take; every case here is done in a few.
CASE_TIMEOUT: Final = 60.0
#: The environment of every case, on top of the test's own with ZDICT_* variables removed.
BASE_ENV: Final = {
    "KAFKA_BOOTSTRAP_SERVERS": UNREACHABLE,
    "ZDICT_REGISTRY__TIMEOUT": "1",
    "ZDICT_RELAY__UNREACHABLE_TIMEOUT": "1",
    "ZDICT_METRICS__PORT": "0",
    "ZDICT_LOG_FORMAT": "json",
}


@dataclass(frozen=True)
class Case:
    """One command line and what it must come to. `{name}` in `argv` is a file of `files`."""

    id: str
    argv: tuple[str, ...]
    code: int
    #: Substrings stderr must contain: the flag, variable, file or address at fault.
    names: tuple[str, ...]
    #: Variables set for this case; None removes one.
    env: Mapping[str, str | None] = field(default_factory=dict)
    #: A file of `files` for standard input (else nothing: /dev/null).
    stdin: str | None = None


def case(
    id: str,
    argv: str | Sequence[str],
    code: int,
    *names: str,
    env: Mapping[str, str | None] | None = None,
    stdin: str | None = None,
) -> Case:
    args = tuple(argv.split()) if isinstance(argv, str) else tuple(argv)
    return Case(id, args, code, names, env or {}, stdin)


USAGE, FAILURE = 2, 1
EVENTS = "--input {events} --namespace orders"
DEEP_JSON = "[" * 100_000
TOO_BIG = str(10**20)

CASES: Final = [
    # -- the command line itself
    case("no-command", [], USAGE, "COMMAND"),
    case("unknown-command", "frobnicate", USAGE, "frobnicate"),
    *(
        case(f"unknown-flag-{'-'.join(argv.split()[:2])}", f"{argv} --bogus", USAGE, "--bogus")
        for argv in (
            "generate",
            f"train {EVENTS}",
            "evaluate {events}",
            "run",
            "proxy",
            "cat -t t",
            "verify -i t",
            "report --metrics http://127.0.0.1:1/metrics --out x.png",
            "demo",
            "bench codec",
            "bench relay",
            "bench storage",
            "bench lifecycle",
            "bench producer",
            "bench choice",
            "bench wire",
            "bench proxy",
            "bench savings",
            "bench registry",
            "dicts list",
            "dicts show 40000",
            "dicts activate --namespace orders 40000",
            "dicts rollback --namespace orders",
            "dicts status",
            "dicts pin --namespace orders",
            "dicts unpin --namespace orders",
            "dicts export out.backup",
            "dicts import {junk}",
            "dicts reindex",
            "dicts retire",
        )
    ),
    # -- generate
    case("generate-negative-count", "generate -n -5", USAGE, "-n/--count", "'-5'"),
    case("generate-unknown-kind", "generate --kind nope", USAGE, "--kind", "nope"),
    case("generate-negative-drift", "generate --drift-at -1", USAGE, "--drift-at"),
    # -- train
    case("train-heldout-above-1", f"train {EVENTS} --heldout-fraction 1.5", USAGE, "--heldout"),
    case("train-heldout-nan", f"train {EVENTS} --heldout-fraction nan", USAGE, "--heldout"),
    case("train-negative-budget", f"train {EVENTS} --budget-us -1", USAGE, "--budget-us", "-1"),
    case("train-budget-inf", f"train {EVENTS} --budget-mb-per-s inf", USAGE, "--budget-mb-per-s"),
    case("train-sample-0", f"train {EVENTS} --sample 0", USAGE, "--sample"),
    case("train-no-source", "train --namespace orders", USAGE, "--input", "--topic"),
    case("train-no-namespace", "train --input {events}", USAGE, "--namespace"),
    case("train-bad-namespace", "train --input {events} --namespace ../x", USAGE, "'../x'"),
    case("train-missing-file", "train --input {missing} --namespace o", FAILURE, "{missing}"),
    case("train-directory", "train --input {dir} --namespace o", FAILURE, "{dir}", "directory"),
    case("train-dev-zero", "train --input /dev/zero --namespace o", FAILURE, "/dev/zero"),
    case(
        "train-stdin-zero",
        "train --input - --namespace o",
        FAILURE,
        "standard input",
        stdin="/dev/zero",
    ),
    case("train-empty", "train --input {empty} --namespace o", FAILURE, "{empty}", "empty"),
    case("train-junk", "train --input {junk} --namespace o", FAILURE, "too few usable samples"),
    case(
        "train-store-is-a-file",
        f"train {EVENTS} --dictionaries {{junk}}",
        USAGE,
        "--dictionaries",
        "{junk}",
    ),
    case("train-topic-unreachable", "train --topic t --publish", FAILURE, UNREACHABLE),
    case(
        "train-configured-no-topic",
        "train --configured-topics",
        USAGE,
        "--configured-topics",
        "ZDICT_RELAY__INPUT_TOPICS",
        "ZDICT_PROXY__TOPICS",
    ),
    case(
        "train-configured-and-topic",
        "train --configured-topics --topic t",
        USAGE,
        "--topic",
        "--configured-topics",
    ),
    case(
        "train-configured-namespace",
        "train --configured-topics --namespace o",
        USAGE,
        "--namespace",
        "--configured-topics",
    ),
    case(
        "train-configured-unreachable",
        "train --configured-topics --publish",
        FAILURE,
        UNREACHABLE,
        env={"ZDICT_RELAY__INPUT_TOPICS": '["a", "b"]'},
    ),
    case(
        "env-scrub-not-json",
        f"train {EVENTS}",
        USAGE,
        "ZDICT_TRAINING__SCRUB",
        env={"ZDICT_TRAINING__SCRUB": "notjson"},
    ),
    case(
        "env-scrub-deep-json",
        f"train {EVENTS}",
        USAGE,
        "ZDICT_TRAINING__SCRUB",
        env={"ZDICT_TRAINING__SCRUB": DEEP_JSON},
    ),
    case(
        "env-scrub-bad-regex",
        f"train {EVENTS}",
        USAGE,
        "ZDICT_TRAINING__SCRUB",
        env={"ZDICT_TRAINING__SCRUB": '["("]'},
    ),
    case(
        "env-level-out-of-range",
        f"train {EVENTS}",
        USAGE,
        "ZDICT_CODEC__LEVEL",
        env={"ZDICT_CODEC__LEVEL": "99"},
    ),
    case(
        "env-output-size-huge",
        f"train {EVENTS}",
        USAGE,
        "ZDICT_CODEC__MAX_OUTPUT_SIZE",
        env={"ZDICT_CODEC__MAX_OUTPUT_SIZE": TOO_BIG},
    ),
    case("config-missing", f"train {EVENTS} --config {{missing}}", USAGE, "{missing}"),
    case("config-bad-toml", f"train {EVENTS} --config {{bad_toml}}", USAGE, "{bad_toml}"),
    case("config-deep-toml", f"train {EVENTS} --config {{deep_toml}}", USAGE, "{deep_toml}"),
    case("config-junk", f"train {EVENTS} --config {{junk}}", USAGE, "{junk}"),
    case("config-directory", f"train {EVENTS} --config {{dir}}", USAGE, "{dir}"),
    case("config-dev-zero", f"train {EVENTS} --config /dev/zero", USAGE, "/dev/zero"),
    case(
        "config-unknown-key",
        f"train {EVENTS} --config {{unknown_toml}}",
        USAGE,
        "codec.levle",
        "{unknown_toml}",
    ),
    # -- evaluate
    case(
        "evaluate-fraction-above-1",
        "evaluate {events} --train-fraction 1.5",
        USAGE,
        "--train-fraction",
    ),
    case("evaluate-sample-negative", "evaluate {events} --sample -1", USAGE, "--sample"),
    case("evaluate-missing-file", "evaluate {missing}", FAILURE, "{missing}"),
    case("evaluate-directory", "evaluate {dir}", FAILURE, "{dir}"),
    case("evaluate-dev-zero", "evaluate /dev/zero", FAILURE, "/dev/zero"),
    case("evaluate-stdin-zero", "evaluate -", FAILURE, "standard input", stdin="/dev/zero"),
    case("evaluate-junk", "evaluate {junk}", FAILURE, "too few usable samples"),
    case(
        "evaluate-env-dict-size",
        "evaluate {events}",
        USAGE,
        "ZDICT_TRAINING__DICT_SIZES",
        env={"ZDICT_TRAINING__DICT_SIZES": "[1]"},
    ),
    # -- run
    case("run-workers-0", "run --input-topic t --workers 0", USAGE, "--workers"),
    case("run-batch-size-0", "run --input-topic t --batch-size 0", USAGE, "--batch-size"),
    case("run-metrics-port", "run --input-topic t --metrics-port 70000", USAGE, "--metrics-port"),
    case("run-mode", "run --input-topic t --mode sideways", USAGE, "--mode"),
    case("run-no-input-topic", "run", USAGE, "--input-topic", "ZDICT_RELAY__INPUT_TOPICS"),
    case(
        "run-unreachable",
        "run --input-topic t",
        FAILURE,
        UNREACHABLE,
        "ZDICT_RELAY__UNREACHABLE_TIMEOUT",
    ),
    case(
        "run-store-checked-before-kafka",
        "run --input-topic t --dictionaries {bad_store}",
        FAILURE,
        "{bad_store}/t/ACTIVE",
        "ZDICT_DICTIONARIES",
    ),
    case(
        "run-no-bootstrap",
        "run --input-topic t",
        USAGE,
        "KAFKA_BOOTSTRAP_SERVERS",
        env={"KAFKA_BOOTSTRAP_SERVERS": None},
    ),
    case(
        "run-unresolvable-broker",
        "run --input-topic t",
        FAILURE,
        "DNS does not resolve no-such-broker.invalid",
        env={"KAFKA_BOOTSTRAP_SERVERS": "no-such-broker.invalid:9092"},
    ),
    case(
        "run-metrics-port-in-use",
        "run --input-topic t --metrics-port {busy_port}",
        USAGE,
        "the metrics port {busy_port} is in use",
        "ZDICT_METRICS__PORT",
    ),
    # -- proxy
    case("proxy-listen", "proxy --listen nowhere", USAGE, "ZDICT_PROXY__LISTEN", "nowhere"),
    case("proxy-listen-port", "proxy --listen 127.0.0.1:99999", USAGE, "ZDICT_PROXY__LISTEN"),
    case("proxy-forward-flag", "proxy --forward", USAGE, "--forward"),
    case(
        "proxy-removed-setting",
        "proxy",
        USAGE,
        "ZDICT_PROXY__UPSTREAM_TOPIC",
        "remove it",
        env={"ZDICT_PROXY__UPSTREAM_TOPIC": "{topic}.zd"},
    ),
    case("proxy-metrics-port", "proxy --metrics-port 70000", USAGE, "--metrics-port"),
    case("proxy-unreachable", "proxy --listen 127.0.0.1:0", FAILURE, UNREACHABLE),
    case(
        "proxy-no-bootstrap",
        "proxy --listen 127.0.0.1:0",
        USAGE,
        "KAFKA_BOOTSTRAP_SERVERS",
        env={"KAFKA_BOOTSTRAP_SERVERS": None},
    ),
    case(
        "proxy-metrics-port-in-use",
        "proxy --listen 127.0.0.1:0 --metrics-port {busy_port}",
        USAGE,
        "the metrics port {busy_port} is in use",
    ),
    case(
        "env-input-topics-not-json",
        "run",
        USAGE,
        "ZDICT_RELAY__INPUT_TOPICS",
        env={"ZDICT_RELAY__INPUT_TOPICS": "a,b"},
    ),
    case(
        "env-log-level",
        "run --input-topic t",
        USAGE,
        "ZDICT_LOG_LEVEL",
        env={"ZDICT_LOG_LEVEL": "loud"},
    ),
    case(
        "env-kafka-section-not-json",
        "run --input-topic t",
        USAGE,
        "ZDICT_KAFKA",
        env={"ZDICT_KAFKA": "{"},
    ),
    case(
        "env-kafka-unknown-property",
        "run --input-topic t",
        USAGE,
        "ZDICT_KAFKA__NO_SUCH_PROPERTY",
        env={"ZDICT_KAFKA__NO_SUCH_PROPERTY": "1"},
    ),
    case(
        "env-replication-factor",
        "run --input-topic t",
        USAGE,
        "ZDICT_REGISTRY__REPLICATION_FACTOR",
        env={"ZDICT_REGISTRY__REPLICATION_FACTOR": TOO_BIG},
    ),
    # -- cat, verify
    case("cat-delimiter-x", ["cat", "-t", "t", "-D", "\\x"], USAGE, "--delimiter", "\\x"),
    case("cat-delimiter-N", ["cat", "-t", "t", "-D", "\\N"], USAGE, "--delimiter", "\\N"),
    case("cat-partition-negative", "cat -t t -p -1", USAGE, "--partition"),
    case("cat-count-0", "cat -t t -c 0", USAGE, "--count"),
    case("cat-offset-word", "cat -t t -o middle", USAGE, "--offset", "middle"),
    case("cat-offset-huge", f"cat -t t -o {TOO_BIG}", USAGE, "--offset"),
    case("cat-no-topic", "cat", USAGE, "--topic"),
    case("cat-unreachable", "cat -t t -e", FAILURE, UNREACHABLE),
    case("verify-no-input", "verify", USAGE, "--input"),
    case("verify-unreachable", "verify -i t", FAILURE, UNREACHABLE),
    # -- report
    case("report-no-source", "report --out x.png", USAGE, "--prometheus", "--metrics"),
    case("report-not-a-url", "report --metrics not-a-url --out x.png", USAGE, "--metrics"),
    case("report-file-url", "report --metrics file:///etc/passwd --out x.png", USAGE, "--metrics"),
    case(
        "report-bad-regex",
        "report --prometheus {http} --namespace ( --out x.png",
        USAGE,
        "--namespace",
    ),
    case(
        "report-zero-range", "report --prometheus {http} --range 0s --out x.png", USAGE, "--range"
    ),
    case("report-out-not-png", "report --metrics {http}/metrics --out x.txt", USAGE, "--out"),
    case(
        "report-out-under-a-file",
        "report --metrics {http}/metrics --out {junk}/x.png",
        USAGE,
        "--out",
        "{junk}",
    ),
    case(
        "report-unreachable",
        f"report --metrics http://{UNREACHABLE}/metrics --out x.png",
        FAILURE,
        UNREACHABLE,
    ),
    case(
        "report-metrics-junk",
        "report --metrics {http}/metrics --out x.png",
        FAILURE,
        "{http}/metrics",
    ),
    case("report-prometheus-junk", "report --prometheus {http} --out x.png", FAILURE, "{http}"),
    # -- demo
    case(
        "demo-no-bootstrap",
        "demo",
        USAGE,
        "KAFKA_BOOTSTRAP_SERVERS",
        env={"KAFKA_BOOTSTRAP_SERVERS": None},
    ),
    case("demo-duration-0", "demo --duration 0", USAGE, "--duration"),
    case("demo-unreachable", "demo --duration 30", FAILURE, UNREACHABLE),
    case("demo-relay-unreachable", "demo --relay --duration 30", FAILURE, UNREACHABLE),
    case("demo-rate-0", "demo --rate 0", USAGE, "--rate"),
    # -- bench
    case("bench-savings-no-data-dir", "bench savings", USAGE, "--data-dir"),
    case(
        "bench-savings-unknown-corpus",
        "bench savings --corpus nope --data-dir {root}",
        USAGE,
        "--corpus nope",
    ),
    case("bench-codec-runs-2", "bench codec --runs 2", USAGE, "--runs"),
    case("bench-codec-count-0", "bench codec -n 0", USAGE, "--count"),
    case("bench-codec-dev-zero", "bench codec --input /dev/zero", FAILURE, "/dev/zero"),
    case("bench-codec-missing", "bench codec --input {missing}", FAILURE, "{missing}"),
    case("bench-codec-junk", "bench codec --input {junk}", FAILURE, "too few usable samples"),
    case("bench-codec-json-out-dir", "bench codec --json-out {dir}", USAGE, "--json-out", "{dir}"),
    case(
        "bench-relay-no-bootstrap",
        "bench relay",
        USAGE,
        "KAFKA_BOOTSTRAP_SERVERS",
        env={"KAFKA_BOOTSTRAP_SERVERS": None},
    ),
    case("bench-relay-latency-word", "bench relay --latency-rate fast", USAGE, "--latency-rate"),
    case("bench-relay-partitions-0", "bench relay --partitions 0", USAGE, "--partitions"),
    case("bench-relay-png", "bench relay --png x.jpg", USAGE, "--png"),
    case("bench-relay-unreachable", "bench relay -n 100", FAILURE, UNREACHABLE),
    case("bench-storage-fills-words", "bench storage --fills a,b", USAGE, "--fills"),
    case("bench-storage-broker-pid", "bench storage --broker-pid 0", USAGE, "--broker-pid"),
    case("bench-storage-no-data-dir", "bench storage", USAGE, "--data-dir"),
    case("bench-storage-unreachable", "bench storage --data-dir {dir}", FAILURE, UNREACHABLE),
    case(
        "bench-lifecycle-drift-after", "bench lifecycle --drift-after 100", USAGE, "--drift-after"
    ),
    case("bench-lifecycle-cost-rounds", "bench lifecycle --cost-rounds 1", USAGE, "--cost-rounds"),
    case("bench-lifecycle-unreachable", "bench lifecycle", FAILURE, UNREACHABLE),
    case("bench-registry-levels-down", "bench registry --levels 1000,100", USAGE, "--levels"),
    case("bench-registry-runs-1", "bench registry --runs 1", USAGE, "--runs"),
    case("bench-registry-unreachable", "bench registry", FAILURE, UNREACHABLE),
    case("bench-producer-count-10", "bench producer -n 10", USAGE, "--count"),
    case("bench-producer-runs-1", "bench producer --runs 1", USAGE, "--runs"),
    case("bench-producer-fills-0", "bench producer --fills 0,1", USAGE, "--fills"),
    case("bench-producer-unreachable", "bench producer", FAILURE, UNREACHABLE),
    case(
        "bench-proxy-no-kafka-local",
        "bench proxy --kafka-local {missing}",
        FAILURE,
        "--kafka-local",
        "{missing}",
    ),
    case("bench-choice-limit-0", "bench choice --limit 0", USAGE, "--limit"),
    case("bench-choice-unknown-corpus", "bench choice --corpus nope", USAGE, "--corpus", "nope"),
    case("bench-choice-json-out-dir", "bench choice --json-out {dir}", USAGE, "--json-out"),
    case("bench-wire-unknown-kind", "bench wire --kind nope", USAGE, "--kind", "nope"),
    case("bench-wire-negative-pairs", "bench wire --pairs -1", USAGE, "--pairs"),
    # -- dicts
    case("dicts-list-bad-namespace", "dicts list --namespace ../x", USAGE, "'../x'"),
    case(
        "dicts-list-store-under-a-file",
        "dicts list --dictionaries {junk}/store",
        USAGE,
        "--dictionaries",
        "{junk}/store",
    ),
    case("dicts-show-reserved-id", "dicts show 5", USAGE, "id", "32768"),
    case("dicts-show-unknown", "dicts show 40000", FAILURE, "40000"),
    case("dicts-activate-unknown", "dicts activate --namespace orders 40000", FAILURE, "40000"),
    case("dicts-activate-no-namespace", "dicts activate 40000", USAGE, "--namespace"),
    case("dicts-rollback-nothing", "dicts rollback --namespace orders", FAILURE, "orders"),
    case(
        "dicts-list-registry-unreachable",
        "dicts list --registry",
        FAILURE,
        UNREACHABLE,
        "ZDICT_REGISTRY__TIMEOUT",
    ),
    case(
        "dicts-list-registry-no-bootstrap",
        "dicts list --registry",
        USAGE,
        "KAFKA_BOOTSTRAP_SERVERS",
        env={"KAFKA_BOOTSTRAP_SERVERS": None},
    ),
    case("dicts-export-unreachable", "dicts export out.backup", FAILURE, UNREACHABLE),
    case("dicts-reindex-unreachable", "dicts reindex", FAILURE, UNREACHABLE),
    case("dicts-retire-bad-topic", "dicts retire --topic orders=", USAGE, "--topic orders="),
    case(
        "dicts-retire-negative-days",
        "dicts retire --older-than-days -1",
        USAGE,
        "--older-than-days",
    ),
    case(
        "dicts-status-unreachable", "dicts status", FAILURE, UNREACHABLE, "ZDICT_REGISTRY__TIMEOUT"
    ),
    case("dicts-status-metrics-not-a-url", "dicts status --metrics not-a-url", USAGE, "--metrics"),
    case(
        "dicts-status-metrics-unreachable",
        f"dicts status --metrics http://{UNREACHABLE}/metrics",
        FAILURE,
        "--metrics",
        UNREACHABLE,
    ),
    case("dicts-status-bad-namespace", "dicts status --namespace ../x", USAGE, "'../x'"),
    case("dicts-pin-no-namespace", "dicts pin", USAGE, "--namespace"),
    case("dicts-pin-unreachable", "dicts pin --namespace orders", FAILURE, UNREACHABLE),
    case(
        "dicts-unpin-no-bootstrap",
        "dicts unpin --namespace orders",
        USAGE,
        "KAFKA_BOOTSTRAP_SERVERS",
        env={"KAFKA_BOOTSTRAP_SERVERS": None},
    ),
    case("dicts-export-no-file", "dicts export", USAGE, "FILE"),
    case("dicts-import-missing", "dicts import {missing}", FAILURE, "{missing}"),
    case("dicts-import-junk", "dicts import {junk}", FAILURE, "{junk}", "not a registry backup"),
    case("dicts-import-empty", "dicts import {empty}", FAILURE, "{empty}", "not a registry backup"),
]


class _JunkHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with binary junk: neither Prometheus's API nor a /metrics page."""

    def do_GET(self) -> None:
        body = random.Random(5).randbytes(2048)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: the test reads the commands' stderr, not the server's."""


@pytest.fixture(scope="module")
def junk_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _JunkHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def busy_port() -> Iterator[str]:
    """A port of the loopback something else listens on (a metrics port taken)."""
    with socket.create_server(("0.0.0.0", 0)) as taken:
        yield str(taken.getsockname()[1])


@pytest.fixture(scope="module")
def files(
    tmp_path_factory: pytest.TempPathFactory, junk_server: str, busy_port: str
) -> dict[str, str]:
    """The files (and the server) the cases name, in a directory that is also their cwd."""
    root = tmp_path_factory.mktemp("bad-input")
    paths = {
        "events": root / "events.ndjson",
        "empty": root / "empty.txt",
        "junk": root / "junk.bin",
        "dir": root / "a-directory",
        "missing": root / "missing.txt",
        "bad_toml": root / "bad.toml",
        "deep_toml": root / "deep.toml",
        "unknown_toml": root / "unknown.toml",
        "bad_store": root / "bad-store",
    }
    paths["events"].write_bytes(b'{"event": "viewed", "product": 1}\n' * 50)
    paths["empty"].write_bytes(b"")
    # About 16 "lines" of random bytes: too few to train on (whatever their content).
    paths["junk"].write_bytes(random.Random(12).randbytes(4096))
    paths["dir"].mkdir()
    paths["bad_toml"].write_text("[codec\nlevel = \n")
    paths["deep_toml"].write_text("a = " + "[" * 100_000 + "\n")
    paths["unknown_toml"].write_text("[codec]\nlevle = 3\n")
    # Topic t's active dictionary is no id at all (the relay would stop at it).
    (paths["bad_store"] / "t").mkdir(parents=True)
    (paths["bad_store"] / "t" / "ACTIVE").write_text("junk\n")
    named = {"root": str(root), "http": junk_server, "busy_port": busy_port}
    return named | {k: str(v) for k, v in paths.items()}


@dataclass(frozen=True)
class Outcome:
    code: int
    stderr: str
    seconds: float


def _environment(case: Case) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ZDICT_") and k != "KAFKA_BOOTSTRAP_SERVERS"
    }
    env.update(BASE_ENV)
    for name, value in case.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _run(case: Case, files: Mapping[str, str]) -> Outcome:
    argv = [arg.format_map(files) if "{" in arg else arg for arg in case.argv]
    started = time.monotonic()
    with open(case.stdin or os.devnull, "rb") as stdin:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "sidecar", *argv],
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=files["root"],
                env=_environment(case),
                timeout=CASE_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return Outcome(-1, f"(still running after {CASE_TIMEOUT:.0f} s)", CASE_TIMEOUT)
    stderr = done.stderr.decode("utf-8", "replace")
    return Outcome(done.returncode, stderr, time.monotonic() - started)


@pytest.fixture(scope="module")
def outcomes(files: dict[str, str]) -> dict[str, Outcome]:
    """Every case, run once, several at a time (most of a case is Python starting or a
    refused connection's timeout)."""
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 2)) as pool:
        runs = pool.map(lambda c: _run(c, files), CASES)
        return dict(zip([c.id for c in CASES], runs, strict=True))


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


def test_every_subcommand_has_cases() -> None:
    """Every command `zdict-sidecar --help` lists (and every one under bench and dicts)."""
    from sidecar.cli.main import build_parser

    def commands(parser: object, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
        import argparse

        assert isinstance(parser, argparse.ArgumentParser)
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            yield prefix
        for action in actions:
            for name, sub in action.choices.items():
                yield from commands(sub, (*prefix, name))

    covered = {c.argv[: len(command)] for c in CASES for command in commands(build_parser())}
    missing = [" ".join(command) for command in commands(build_parser()) if command not in covered]
    assert missing == []


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_one_clear_message_and_its_exit_code(
    case: Case, outcomes: dict[str, Outcome], files: dict[str, str]
) -> None:
    outcome = outcomes[case.id]
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.code == case.code, outcome.stderr
    # The names are looked for in the messages, not in argparse's usage (it lists every flag).
    messages = "\n".join(
        line for line in outcome.stderr.splitlines() if not line.startswith(("usage:", " "))
    )
    for name in case.names:
        assert name.format_map(files) in messages, outcome.stderr
