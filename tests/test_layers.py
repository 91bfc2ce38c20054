"""The layout holds: the package's folders are its layers, each imports only the layers below
it, no import cycle, and d1saver.compaction (the repository's compaction/ folder) reaches d1saver
through its public names and its maintenance API (d1saver.admin) only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each folder of the repository and the package it installs as (pyproject.toml's package-dir).
PACKAGES = {"d1saver": "d1saver", "compaction": "d1saver.compaction"}

# The layer folders of d1saver/, bottom first, with the layers each may import
# (docs/ARCHITECTURE.md draws the same picture).
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "sql": set(),
    "storage": {"core"},
    "http": {"core"},
    "local": {"core"},
    "ops": {"core", "sql", "storage"},
    "fleet": {"core", "sql", "storage", "http", "ops"},
    "memory": {"core", "sql", "storage", "http", "fleet"},
}
# The public surface on top: any layer below, never compaction.
PUBLIC_MODULES = {"__init__", "__main__", "saver", "admin", "demo", "inspection", "agent_server",
                  "upstream"}
PUBLIC_PACKAGES = {"cli", "ui"}
# What compaction/ may import of d1saver: its public names (d1saver/__init__.py's __all__) and
# the maintenance API, besides its own modules.
COMPACTION = "d1saver.compaction"
COMPACTION_MAY_IMPORT = {"d1saver", "d1saver.admin"}
# The only modules of d1saver that import compaction: the command line that runs its jobs.
COMMAND_LINE = "d1saver.cli"


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [*package.split("."), *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of d1saver that `name` imports (a submodule if named, else the package)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    """Depth-first search over d1saver (with d1saver.compaction): no module reaches itself."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # A package's __init__ re-exporting its own submodules is not a cycle of layers.
            if state.get(nxt) == 1 and not node.startswith(nxt + "."):
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "d1saver" and len(parts) > 2 and parts[1] in LAYERS else None


def test_layers_import_only_downward(graph: dict[str, set[str]]) -> None:
    for module, deps in graph.items():
        layer = _layer(module)
        if layer is None:
            continue
        for dep in deps:
            if not dep.startswith("d1saver"):
                continue
            below = _layer(dep)
            assert below is not None, f"{module} imports {dep}, the public surface above it"
            assert below == layer or below in LAYERS[layer], \
                f"{module} ({layer}) imports {dep} ({below}), not a layer below it"


def test_every_module_sits_in_a_layer_or_is_public() -> None:
    package = ROOT / "d1saver"
    loose = {p.stem for p in package.glob("*.py")} - PUBLIC_MODULES
    folders = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert not loose, f"modules outside the layer folders: {sorted(loose)}"
    assert folders <= set(LAYERS) | PUBLIC_PACKAGES, sorted(folders - set(LAYERS) - PUBLIC_PACKAGES)


def test_layer_check_can_fail() -> None:
    """The checker itself: an upward import is found."""
    with pytest.raises(AssertionError, match="not a layer below"):
        test_layers_import_only_downward({"d1saver.storage.values": {"d1saver.ops.rows"}})


def _in_compaction(module: str) -> bool:
    return module == COMPACTION or module.startswith(COMPACTION + ".")


def test_compaction_uses_only_the_public_and_maintenance_apis(graph: dict[str, set[str]]) -> None:
    """d1saver.compaction imports its own modules, `d1saver` and `d1saver.admin`, nothing else
    of d1saver (no layer, no command-line helper, not d1saver.inspection)."""
    compaction = [m for m in graph if _in_compaction(m)]
    assert f"{COMPACTION}.job" in compaction and f"{COMPACTION}.rebalance" in compaction
    for module in compaction:
        other = sorted(d for d in graph[module] if not _in_compaction(d)
                       and d not in COMPACTION_MAY_IMPORT)
        assert not other, f"{module} imports {other}: only d1saver's public names and d1saver.admin"


def test_compaction_check_can_fail() -> None:
    """The check itself: compaction importing a layer, or the inspection module, is found."""
    for planted in ("d1saver.ops.transfer", "d1saver.inspection", "d1saver.cli.support"):
        with pytest.raises(AssertionError, match="only d1saver's public names"):
            test_compaction_uses_only_the_public_and_maintenance_apis(
                {f"{COMPACTION}.job": {"d1saver", planted}, f"{COMPACTION}.rebalance": set()})


def test_only_the_command_line_imports_compaction(graph: dict[str, set[str]]) -> None:
    for module, deps in graph.items():
        if _in_compaction(module) or module == COMMAND_LINE or module.startswith(COMMAND_LINE + "."):
            continue
        assert not [d for d in deps if _in_compaction(d)], module


def test_cycle_detector_can_fail() -> None:
    """The detector itself: a planted cycle is found."""
    planted = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(AssertionError, match="cycle"):
        test_no_import_cycle(planted)
