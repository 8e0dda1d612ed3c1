"""The package's shape, checked: its layers, no import cycles, and the pure logic free of Kafka.

The module graph is read from the source (AST), so every import statement counts: module level,
inside functions (lazy imports) and under `if TYPE_CHECKING:`. An import of `a.b.c` is an edge to
the deepest of `a.b.c`, `a.b`, `a` that is a module of the package, and to the `__init__` of every
package above it: importing a submodule runs its parents first. The packages that contain the
importing module itself are left out of those implicit edges, because Python has initialised them
before the module runs (an explicit `from package import name` still counts).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import pytest

import sidecar
from sidecar import errors

Graph = dict[str, set[str]]

PACKAGE_DIR = Path(sidecar.__file__).parent

#: The layers, highest first (`make lint` checks them): a module imports modules of its own layer
#: and of the layers below it, never of one above. The entry points (cli) over the benchmarks and
#: the demo, which no product code imports; the deployment modes and the offline tools, which
#: import none of each other (`INDEPENDENT`); their shared per-topic core; training over the
#: metrics over the dictionaries' store and registry; Kafka's clients over the settings; the codec
#: with the values it reads (the dictionary model, a training run's parameters); and below all,
#: errors, logs, the runtime, what batches of records cost as stored, and Kafka's wire formats
#: (`sidecar.wire`: varints, the record-batch layout).
#: A module is in the layer of the longest entry naming it or a package above it; an entry
#: "=name" names a package's own `__init__` only (one that re-exports a lower layer's values).
LAYERS: Final = (
    ("cli", ("sidecar.cli", "sidecar.__main__")),
    ("bench", ("sidecar.bench",)),
    ("modes", ("sidecar.relay", "sidecar.proxy", "sidecar.serde", "sidecar.tools")),
    (
        "core",
        (
            "sidecar.namespaces",
            "sidecar.observability",
            "sidecar.health",
            "sidecar.stored_estimate",
            "sidecar.live_crossover",
            "sidecar.output_mode_log",
        ),
    ),
    ("training", ("sidecar.training",)),
    ("metrics", ("sidecar.metrics", "sidecar.cgroup_memory")),
    ("dictionaries", ("sidecar.dictionaries",)),
    ("kafka", ("sidecar.kafka",)),
    ("config", ("sidecar.config",)),
    (
        "codec",
        (
            "sidecar.codec",
            "sidecar.dictionaries.model",
            "=sidecar.dictionaries",
            "sidecar.training.params",
        ),
    ),
    (
        "base",
        (
            "=sidecar",
            "sidecar.compiled",
            "=sidecar.training",
            "sidecar.errors",
            "sidecar.logs",
            "sidecar.runtime",
            "sidecar.record_batch",
            "sidecar.batch_compression",
            "sidecar.wire",
        ),
    ),
)
#: Entries of one layer that import nothing of each other.
INDEPENDENT: Final = ("sidecar.relay", "sidecar.proxy", "sidecar.serde", "sidecar.tools")

#: The proxy's own layers (`make lint` checks them as LAYERS): the service assembles the rest
#: (the filter chain it hands the listeners included); the filters (one per API behaviour) over
#: what they apply (the rules, the parsers and writers of requests and records); the network
#: layer (connections, sides, budget, upstream), which knows no API: it imports none of the
#: layers above, only the wire layer (frames, the filter API and chain, responses, API keys and
#: versions, metrics).
PROXY_LAYERS: Final = (
    (
        "assembly",
        (
            "sidecar.proxy.service",
            "sidecar.proxy.listeners",
            "=sidecar.proxy.filters",
            "sidecar.proxy.known_topics",
            "sidecar.proxy.routes",
        ),
    ),
    ("filters", ("sidecar.proxy.filters",)),
    (
        "rules",
        tuple(
            f"sidecar.proxy.{name}"
            for name in (
                "access",
                "allowlist",
                "batch_choice",
                "batches",
                "client_sasl",
                "fetch",
                "fetch_metrics",
                "fetched",
                "group_protocol",
                "hiding",
                "lookups",
                "node_addresses",
                "produce",
                "produce_request",
                "produce_response",
                "refusals",
                "topics",
                "turns",
            )
        ),
    ),
    (
        "network",
        tuple(
            f"sidecar.proxy.{name}"
            for name in (
                "addresses",
                "budget",
                "connection",
                "correlation",
                "sasl",
                "security",
                "sides",
                "slots",
                "upstream",
            )
        ),
    ),
    (
        "wire",
        tuple(
            f"sidecar.proxy.{name}"
            for name in (
                "bounded",
                "chain",
                "filter",
                "frames",
                "metrics",
                "responses",
                "throttle",
                "versions",
            )
        ),
    ),
    ("package", ("=sidecar.proxy",)),
)

#: The pure logic: Kafka's wire formats, the codec and its wire format, training and its
#: decision, the dictionary model (and the package that re-exports it), the registry's state,
#: the schedule, the sampling reservoir.
PURE = (
    "sidecar.wire",
    "sidecar.wire.varint",
    "sidecar.wire.record_batch",
    "sidecar.codec",
    "sidecar.codec.wire",
    "sidecar.codec.encoder",
    "sidecar.codec.decoder",
    "sidecar.codec.results",
    "sidecar.codec.precompressed",
    "sidecar.codec.output_mode",
    "sidecar.dictionaries",
    "sidecar.dictionaries.model",
    "sidecar.dictionaries.registry_state",
    "sidecar.dictionaries.retirement",
    "sidecar.training.choice",
    "sidecar.training.cost",
    "sidecar.training.crossover",
    "sidecar.training.split",
    "sidecar.training.schedule",
    "sidecar.training.params",
    "sidecar.training.sampling",
)
#: What the pure logic must not reach, directly or through other modules of the package.
KAFKA_SIDE = (
    "sidecar.kafka",
    "sidecar.relay",
    "sidecar.relay.service",
    "sidecar.dictionaries.registry",
    "sidecar.dictionaries.registry_fetch",
    "sidecar.dictionaries.registry_index",
    "sidecar.dictionaries.registry_topics",
    "sidecar.training.trainer",
)
#: The modules that read and write files, which the pure logic must not reach either.
FILE_IO = ("sidecar.dictionaries.store",)
#: All that `import sidecar.codec` may load of the package besides the codec itself (the
#: package's `__init__` imports `sidecar.compiled`, the standard library's only).
CODEC_BUILDS_ON = frozenset(
    {
        "sidecar",
        "sidecar.compiled",
        "sidecar.errors",
        "sidecar.dictionaries",
        "sidecar.dictionaries.model",
        "sidecar.wire",
        "sidecar.wire.varint",
    }
)
#: The project's dependencies for Kafka, the proxy, metrics, logs and settings: nothing a consumer
#: that only decodes needs (import names).
NOT_FOR_THE_CODEC = (
    "confluent_kafka",
    "kio",
    "crc32c",
    "lz4",
    "prometheus_client",
    "structlog",
    "pydantic_settings",
)


def modules_of(package_dir: Path) -> dict[str, Path]:
    """Every module of the package in `package_dir`, by dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name an import statement anywhere in the module may load."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                anchor = here[: len(here) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            # `from package import name` loads the submodule `name` when there is one.
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def deepest_module(name: str, modules: Mapping[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def parents(module: str) -> list[str]:
    """The packages above `module`, outermost first."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def import_graph(package_dir: Path) -> Graph:
    """Module -> the modules of the same package that importing it runs (see the module doc)."""
    modules = modules_of(package_dir)
    graph: Graph = {name: set() for name in modules}
    for module, path in modules.items():
        own = set(parents(module))
        for name in imported_names(module, path):
            target = deepest_module(name, modules)
            if target is None:
                continue
            graph[module].add(target)
            graph[module].update(p for p in parents(target) if p not in own)
    for module, targets in graph.items():
        targets.discard(module)  # `from package import submodule` inside the package itself
    return graph


def third_party_imports(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the top-level names of what it imports from outside the package."""
    modules = modules_of(package_dir)
    return {
        module: {
            name.split(".")[0]
            for name in imported_names(module, path)
            if name and deepest_module(name, modules) is None
        }
        for module, path in modules.items()
    }


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_through(component, graph) for component in components]


def _cycle_through(component: list[str], graph: Graph) -> list[str]:
    """A shortest path from the component's first module back to itself, within the component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        next_frontier: list[str] = []
        for node in frontier:
            for successor in sorted(graph[node] & members):
                if successor == start:
                    return [*paths[node], start]
                if successor not in paths:
                    paths[successor] = [*paths[node], successor]
                    next_frontier.append(successor)
        frontier = next_frontier
    raise AssertionError(f"no cycle through {start} in {component}")  # Tarjan says there is one


def reach(graph: Graph, start: str) -> dict[str, list[str]]:
    """Every module importing `start` runs, with one import path to it."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop()
        for successor in sorted(graph[node]):
            if successor not in paths:
                paths[successor] = [*paths[node], successor]
                frontier.append(successor)
    return paths


def _in(module: str, area: str) -> bool:
    return module == area or module.startswith(area + ".")


def placement(module: str, layers: Sequence[tuple[str, Sequence[str]]]) -> tuple[int, str] | None:
    """The index of `module`'s layer and the entry that places it; None if none names it."""
    best: tuple[tuple[int, bool], int, str] | None = None  # ((length, exact), layer, entry)
    for rank, (_, entries) in enumerate(layers):
        for entry in entries:
            exact = entry.startswith("=")
            area = entry.removeprefix("=")
            if module == area or (not exact and _in(module, area)):
                key = (len(area), exact)  # the longer entry wins, then "=name" over "name"
                if best is None or key > best[0]:
                    best = (key, rank, area)
    return None if best is None else (best[1], best[2])


def layer_violations(
    graph: Graph, layers: Sequence[tuple[str, Sequence[str]]], independent: Sequence[str]
) -> list[str]:
    """Every import from a lower layer up, or between independent entries; every unplaced module."""
    found: list[str] = []
    for module in sorted(graph):
        here = placement(module, layers)
        if here is None:
            found.append(f"{module}: in no layer")
            continue
        for target in sorted(graph[module]):
            there = placement(target, layers)
            if there is None:
                continue  # reported as the target's own line
            if there[0] < here[0]:
                found.append(
                    f"{module} ({layers[here[0]][0]}) imports {target} ({layers[there[0]][0]})"
                )
            elif here[1] != there[1] and here[1] in independent and there[1] in independent:
                found.append(f"{module} imports {target}: {here[1]} and {there[1]} are independent")
    return found


# -- the package ---------------------------------------------------------------------------------


def test_every_module_imports_only_its_own_layer_and_those_below() -> None:
    found = layer_violations(import_graph(PACKAGE_DIR), LAYERS, INDEPENDENT)
    assert not found, "imports against the layers (LAYERS):\n" + "\n".join(found)


def test_the_proxys_network_layer_imports_no_filter_and_no_rule_of_an_api() -> None:
    graph = import_graph(PACKAGE_DIR)
    proxy = {
        module: {target for target in targets if _in(target, "sidecar.proxy")}
        for module, targets in graph.items()
        if _in(module, "sidecar.proxy")
    }
    found = layer_violations(proxy, PROXY_LAYERS, ())
    assert not found, "imports against the proxy's layers (PROXY_LAYERS):\n" + "\n".join(found)


def test_no_import_cycles_inside_the_package_lazy_imports_included() -> None:
    found = cycles(import_graph(PACKAGE_DIR))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize("module", PURE)
def test_the_pure_logic_reaches_neither_kafka_nor_the_relay(module: str) -> None:
    graph = import_graph(PACKAGE_DIR)
    paths = reach(graph, module)
    bad = [" -> ".join(path) for m, path in paths.items() if any(_in(m, a) for a in KAFKA_SIDE)]
    assert not bad, f"{module} reaches the Kafka side:\n" + "\n".join(bad)
    external = third_party_imports(PACKAGE_DIR)
    kafka = [" -> ".join(path) for m, path in paths.items() if "confluent_kafka" in external[m]]
    assert not kafka, f"{module} reaches confluent_kafka:\n" + "\n".join(kafka)


@pytest.mark.parametrize("module", PURE)
def test_the_pure_logic_reaches_no_file_io(module: str) -> None:
    paths = reach(import_graph(PACKAGE_DIR), module)
    bad = [" -> ".join(path) for m, path in paths.items() if any(_in(m, a) for a in FILE_IO)]
    assert not bad, f"{module} reaches file I/O:\n" + "\n".join(bad)


def test_importing_the_codec_loads_only_the_codec_the_model_and_the_errors() -> None:
    """What a consumer that only decodes pays: no store, no Kafka client, none of the relay's
    dependencies (checked in a fresh interpreter, so that what runs is what counts)."""
    probe = "import sys, sidecar.codec; print(*sorted(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = result.stdout.split()
    ours = [m for m in loaded if _in(m, "sidecar")]
    outside = [m for m in ours if not _in(m, "sidecar.codec") and m not in CODEC_BUILDS_ON]
    assert not outside, f"import sidecar.codec loaded {outside}"
    assert "sidecar.codec.wire" in ours  # the probe saw the codec itself
    deps = [m for m in loaded if m.split(".")[0] in NOT_FOR_THE_CODEC]
    assert not deps, f"import sidecar.codec loaded {deps}"


def test_every_exception_of_the_package_is_defined_in_errors() -> None:
    """One exception tree, in one module (`sidecar.errors`), that callers can read at a glance."""
    elsewhere = [
        f"{module}.{name}"
        for module in modules_of(PACKAGE_DIR)
        if not module.endswith(".__main__")  # importing it runs the CLI
        for name, value in vars(importlib.import_module(module)).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module != errors.__name__
    ]
    assert not elsewhere, f"exceptions outside sidecar.errors: {elsewhere}"
    assert errors.TransactionHung.__mro__[1:4] == (
        errors.ClientHung,
        errors.RelayFailed,
        errors.ZdictError,
    )


KAFKA_CLIENTS = frozenset({"Producer", "Consumer", "AdminClient"})


def _outside_kafka_module() -> Iterator[tuple[str, ast.AST]]:
    for module, path in modules_of(PACKAGE_DIR).items():
        if module != "sidecar.kafka" and not module.startswith("sidecar.kafka."):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                yield module, node


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def test_kafka_clients_are_built_in_the_kafka_module_only() -> None:
    """One place sets the clients' properties (and their guarantees): `sidecar.kafka`."""
    built = [
        f"{module}:{node.lineno}"
        for module, node in _outside_kafka_module()
        if (isinstance(node, ast.Call) and _name(node.func) in KAFKA_CLIENTS)
        or (isinstance(node, ast.ClassDef) and any(_name(b) in KAFKA_CLIENTS for b in node.bases))
    ]
    assert not built, f"Kafka clients built outside sidecar.kafka: {built}"


def test_kafka_error_codes_are_read_in_the_kafka_module_only() -> None:
    """librdkafka's codes (its own are private, `KafkaError._…`) are classified in one place."""
    read = [
        f"{module}:{node.lineno} KafkaError.{node.attr}"
        for module, node in _outside_kafka_module()
        if isinstance(node, ast.Attribute) and _name(node.value) == "KafkaError"
    ]
    assert not read, f"KafkaError codes read outside sidecar.kafka: {read}"


# -- the tests -----------------------------------------------------------------------------------

TESTS_DIR = Path(__file__).resolve().parents[1]


def test_the_broker_free_tests_import_nothing_from_the_integration_tests() -> None:
    """tests/unit and tests/deploy run without a broker (`make unit`): what they share with the
    integration tests (the certificate authority, `tests.pki`) lives beside both, not inside
    tests/integration, whose package conftest and fixtures are the broker's."""
    graph = import_graph(TESTS_DIR)
    bad = [
        " -> ".join(path)
        for start in graph
        if _in(start, "tests.unit") or _in(start, "tests.deploy")
        for module, path in reach(graph, start).items()
        if _in(module, "tests.integration")
    ]
    assert not bad, "broker-free tests reach tests.integration:\n" + "\n".join(bad)
    assert "tests.pki" in reach(graph, "tests.unit.test_forward_tls")  # the checker sees them


# -- the checker itself, on a package made for it ------------------------------------------------


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for relative, source in files.items():
        path = root / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root / "pkg"


def test_the_checker_sees_lazy_type_checking_and_relative_imports(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": """
                def later() -> None:
                    from pkg.sub import b
            """,
            "sub/__init__.py": "",
            "sub/b.py": """
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from ..c import Thing
            """,
            "c.py": "from . import a\n",
        },
    )
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_the_checker_counts_parent_packages_but_not_the_importers_own(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            # A package that re-exports its modules, which import each other: not a cycle.
            "sub/__init__.py": "from pkg.sub.model import Model\nfrom pkg.sub.store import Store\n",
            "sub/model.py": "class Model: ...\n",
            "sub/store.py": "from pkg.sub.model import Model\n",
            # Importing pkg.sub.model runs pkg/sub/__init__, which imports pkg.x: a cycle.
            "x.py": "import pkg.sub.model\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg.x"] == {"pkg.sub", "pkg.sub.model"}
    assert graph["pkg.sub.store"] == {"pkg.sub.model"}
    assert cycles(graph) == []
    (package / "sub" / "model.py").write_text("import pkg.x\n")
    assert cycles(import_graph(package)) == [["pkg.sub", "pkg.sub.model", "pkg.x", "pkg.sub"]]


def test_the_layer_checker_reports_an_upward_import_a_sibling_and_an_unplaced_module(
    tmp_path: Path,
) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "from pkg.low.values import V\n",
            "top.py": "import pkg.mid.a\n",
            "mid/__init__.py": "",
            "mid/a.py": "import pkg.mid.b\nimport pkg.top\n",
            "mid/b.py": "from pkg.low import values\n",
            "low/__init__.py": "",
            "low/values.py": "V = 1\n",
            "low/stray.py": "",
            "loose.py": "",
        },
    )
    layers = (
        ("top", ("pkg.top",)),
        ("mid", ("pkg.mid.a", "pkg.mid.b", "=pkg.mid")),
        ("low", ("pkg.low.values", "=pkg.low", "=pkg")),
    )
    graph = import_graph(package)
    assert layer_violations(graph, layers, ()) == [
        "pkg.loose: in no layer",
        "pkg.low.stray: in no layer",
        "pkg.mid.a (mid) imports pkg.top (top)",
    ]
    assert (
        "pkg.mid.a imports pkg.mid.b: pkg.mid.a and pkg.mid.b are independent"
        in layer_violations(graph, layers, ("pkg.mid.a", "pkg.mid.b"))
    )
