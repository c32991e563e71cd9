"""The packages' layering, read from the source with ``ast`` (nothing is imported).

The arrow goes one way, as Kafka's gradle modules: ``cli`` -> ``lab`` -> ``kit`` -> ``spark_jobs``; the nodes
``broker`` and ``controller`` over ``coordinator``, ``raft``, ``fetcher``, ``storage`` and ``server``, and
everything over ``protocol``. The applications (the command line, the lab, the kit and the report) reach
``broker``, ``controller``, ``protocol`` and ``spark_jobs`` only through their front doors (the package's
``__init__``, or a module listed in ``FRONT_DOORS``), so the packages' insides can move without breaking them;
and only ``cli`` speaks click. And no module imports itself back, however far round: every import counts,
including those inside functions and under ``if TYPE_CHECKING:`` (a cycle that only the type checker sees
still ties the two modules' designs together). Nor does a folder: inside a package, each subfolder counts as
one unit beside the modules next to it, and those units import one way only. A shell (the socket server) is
imported only by what owns it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "protocol",
    "server",
    "storage",
    "raft",
    "fetcher",
    "coordinator",
    "controller",
    "broker",
    "spark_jobs",
    "kit",
    "lab",
    "cli",
)

# What each package may import from the others (a package always may import from itself).
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    # What both node kinds run on (socket server, request channel, config base, security, metrics).
    "server": frozenset({"protocol"}),
    # The log: segments, indexes, checkpoints, epoch cache, producer state.
    "storage": frozenset({"protocol"}),
    # The quorum's Raft core over a log.
    "raft": frozenset({"protocol", "storage"}),
    "fetcher": frozenset({"protocol"}),
    # Coordinators over an internal topic, written through the broker's PartitionWriter.
    "coordinator": frozenset({"protocol", "server", "storage"}),
    "controller": frozenset({"protocol", "server", "storage", "raft"}),
    # The broker never imports the controller: they talk over the wire.
    "broker": frozenset({"protocol", "server", "storage", "fetcher", "coordinator"}),
    "spark_jobs": frozenset({"protocol", "broker"}),
    "kit": frozenset({"protocol", "broker", "controller", "spark_jobs"}),
    "lab": frozenset({"protocol", "broker", "controller", "spark_jobs", "kit"}),
    "cli": frozenset({"protocol", "broker", "controller", "spark_jobs", "kit", "lab"}),
}

# The applications: they use the library packages only through their front doors.
APPLICATIONS = frozenset({"cli", "lab", "kit", "spark_jobs"})

# Only the command line speaks click: the kit and the lab are libraries (their errors carry a message, which
# ``cli.main`` shows as click shows its own).
CLICK_FREE = frozenset(set(PACKAGES) - {"cli"})

# The modules of a package that an application may import: its ``__init__`` (the package name), which
# exports what applications need, and any module designed to be used from outside. (``kit`` and ``lab`` have
# no door: each of their modules is made to be used by the floors above.) (Inside the library,
# ``broker`` and ``fetcher`` implement the protocol and use ``protocol``'s modules directly.)
FRONT_DOORS: dict[str, frozenset[str]] = {
    "protocol": frozenset({"protocol"}),
    "fetcher": frozenset({"fetcher"}),
    "broker": frozenset({"broker"}),
    "controller": frozenset({"controller"}),
    "server": frozenset(),
    "storage": frozenset(),
    "raft": frozenset(),
    "coordinator": frozenset(),
    "spark_jobs": frozenset({"spark_jobs.report_job"}),
}

# Shells: modules that do I/O around a core, and the only modules that may import them. The socket server
# (``server.network``) reads requests into ``server.request_channel`` and writes the answers back; the core
# that answers them (``KafkaApis``, the authorizer's helper, the request metrics) imports the channel, never
# the server. Only the processes that own a server build it, and only the metrics that read its gauges
# look at it.
SHELLS: dict[str, frozenset[str]] = {
    "server.network": frozenset(
        {
            "broker.server",
            "controller.controller",
            "broker.metrics.broker_metrics",
            "controller.controller_metrics",
            "server.metrics.network_metrics",
        }
    ),
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.imported}"


def module_files() -> dict[str, Path]:
    """Every module of the packages by dotted name; a package by its own name (its ``__init__``)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = module_files()


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str) -> Iterator[Import]:
    """The project modules ``module`` imports anywhere in its file. ``from a import b`` is an import of
    ``a.b`` when that is a module, else of ``a``; ``import a.b`` is an import of ``a.b``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                for alias in node.names
            ]
        else:
            continue
        for name in dict.fromkeys(names):
            if name in MODULES:
                yield Import(module, name, node.lineno)


GRAPH: dict[str, list[Import]] = {m: list(imports_of(m)) for m in MODULES}


def package_of(module: str) -> str:
    return module.split(".")[0]


def cross_package_imports() -> Iterator[Import]:
    for edges in GRAPH.values():
        for edge in edges:
            if package_of(edge.importer) != package_of(edge.imported):
                yield edge


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iteratively: the sets of modules that reach each other (with a self-import, a
    set of one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1 or node in graph[node]:
                    out.append(frozenset(members))
    return out


def import_cycles() -> list[frozenset[str]]:
    return strongly_connected({m: {e.imported for e in edges} for m, edges in GRAPH.items()})


def file_parts(module: str) -> tuple[str, ...]:
    """A module's path without ``.py``: ``broker/config``, ``controller/__init__``."""
    return MODULES[module].relative_to(ROOT).with_suffix("").parts


def member_of(folder: tuple[str, ...], module: str) -> str | None:
    """What ``module`` is, seen from ``folder``: one of its modules (``config``) or inside one of its
    subfolders (``controller/``); None if it is not under ``folder``."""
    parts = file_parts(module)
    depth = len(folder)
    if parts[:depth] != folder or len(parts) <= depth:
        return None
    return parts[depth] + ("/" if len(parts) > depth + 1 else "")


def folder_graphs() -> dict[tuple[str, ...], dict[str, set[str]]]:
    """For each folder, the imports between its members (its modules and its subfolders, each subfolder
    standing for everything under it): ``a/b/x.py`` importing ``a/c/y.py`` is, in folder ``a``, an edge
    from ``b/`` to ``c/``; in ``a/b``, ``x.py`` importing ``y.py`` is an edge from ``x`` to ``y``."""
    out: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for edges in GRAPH.values():
        for edge in edges:
            a, b = file_parts(edge.importer), file_parts(edge.imported)
            if a[0] != b[0]:
                continue  # across packages: the layers' test
            depth = 1
            while depth < min(len(a), len(b)) - 1 and a[depth] == b[depth]:
                depth += 1
            folder = a[:depth]
            importer, imported = member_of(folder, edge.importer), member_of(folder, edge.imported)
            assert importer is not None and imported is not None
            graph = out.setdefault(folder, {})
            graph.setdefault(importer, set()).add(imported)
            graph.setdefault(imported, set())
    return out


def folder_cycles() -> list[tuple[tuple[str, ...], frozenset[str]]]:
    return [
        (folder, cycle)
        for folder, graph in sorted(folder_graphs().items())
        for cycle in strongly_connected(graph)
        if len(cycle) > 1
    ]


def describe_folder_cycle(folder: tuple[str, ...], cycle: frozenset[str]) -> str:
    lines = [
        f"  {edge}"
        for edges in GRAPH.values()
        for edge in edges
        if member_of(folder, edge.importer) in cycle
        and member_of(folder, edge.imported) in cycle
        and member_of(folder, edge.importer) != member_of(folder, edge.imported)
    ]
    return f"in {'/'.join(folder)}/: {{{', '.join(sorted(cycle))}}}:\n" + "\n".join(lines)


def describe(cycle: frozenset[str]) -> str:
    lines = [f"  {edge}" for m in sorted(cycle) for edge in GRAPH[m] if edge.imported in cycle]
    return "{" + ", ".join(sorted(cycle)) + "}:\n" + "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the tests


def test_every_package_is_found() -> None:
    for package in PACKAGES:
        assert package in MODULES, f"{package}/__init__.py is missing"
    assert len(MODULES) > 50


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = [
        str(e)
        for e in cross_package_imports()
        if package_of(e.importer) == package and package_of(e.imported) not in ALLOWED[package]
    ]
    assert not wrong, (
        f"{package} may import only from {sorted(ALLOWED[package])}; move the shared code down a layer:\n"
        + "\n".join(wrong)
    )


def test_applications_go_through_the_front_doors() -> None:
    wrong = [
        f"{e}, which is not one of {sorted(FRONT_DOORS[package_of(e.imported)])}"
        for e in cross_package_imports()
        if package_of(e.importer) in APPLICATIONS
        and package_of(e.imported) in FRONT_DOORS
        and e.imported not in FRONT_DOORS[package_of(e.imported)]
    ]
    assert not wrong, (
        "import another package through its front door (export the name there if it is missing):\n"
        + "\n".join(wrong)
    )


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_only_the_owners_import_a_shell(shell: str) -> None:
    wrong = [
        str(e)
        for edges in GRAPH.values()
        for e in edges
        if e.imported == shell and e.importer not in SHELLS[shell]
    ]
    assert not wrong, (
        f"{shell} is a shell; only {sorted(SHELLS[shell])} may import it. Import what the core needs from "
        "the module below it (server.request_channel: Request, RequestChannel, the handler pool):\n"
        + "\n".join(wrong)
    )


def third_party_imports(module: str) -> Iterator[tuple[str, int]]:
    """The top-level names of what ``module`` imports from outside the project, with the line."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0], node.lineno


@pytest.mark.parametrize("package", sorted(CLICK_FREE))
def test_only_the_command_line_speaks_click(package: str) -> None:
    wrong = [
        f"{m} (line {line}) imports click"
        for m in MODULES
        if package_of(m) == package
        for name, line in third_party_imports(m)
        if name == "click"
    ]
    assert not wrong, (
        f"{package} is a library under the command line: raise an error with a message (kit.errors.KitError) "
        "and let cli/ turn it into click's:\n" + "\n".join(wrong)
    )


def test_no_import_cycles() -> None:
    cycles = import_cycles()
    assert not cycles, "import cycles (break them: move the shared part into a module both import):\n" + (
        "\n".join(describe(c) for c in cycles)
    )


def test_no_folder_cycles() -> None:
    """Inside a package, a folder is one unit: ``server/security/`` may use ``broker/config.py``, or the
    other way round, but not both (nor round a longer loop of folders and modules)."""
    cycles = folder_cycles()
    assert not cycles, (
        "folder cycles (move the shared part below both, or the module to the folder it belongs to):\n"
        + "\n".join(describe_folder_cycle(f, c) for f, c in cycles)
    )


def test_the_folder_cycle_finder_finds_folder_cycles() -> None:
    # security/ imports config.py; an import back would tie the two together.
    server = folder_graphs()[("server",)]
    assert "config" in server["security/"]
    assert "security/" not in server["config"]
    server["config"].add("security/")
    assert any({"security/", "config"} <= cycle for cycle in strongly_connected(server) if len(cycle) > 1)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b", "c"], ["e"]]


def test_relative_and_from_imports_resolve_to_modules() -> None:
    edges = {e.imported for e in GRAPH["controller.config"]}
    assert "server.config" in edges
    # ``from protocol import controller_messages as cm`` is an import of the module, not of the package.
    users = [m for m, es in GRAPH.items() if any(e.imported == "protocol.controller_messages" for e in es)]
    assert users
