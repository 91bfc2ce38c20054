"""The layout holds: no import cycle, each layer imports only the layers below it, compaction
reaches d1saver through public names only, and no product module outgrows its job."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("d1saver", "compaction")

# Each module may import only modules of the layers listed below it (d1saver/ only).
LAYERS: dict[str, set[str]] = {
    "d1saver._errors": set(),
    "d1saver._protocol": {"d1saver._errors"},  # for annotations only (TYPE_CHECKING)
    "d1saver._codec": set(),
    "d1saver._chunking": set(),
    "d1saver._manifest": {"d1saver._chunking"},
    "d1saver._held": set(),
    "d1saver._sql": set(),
    "d1saver._delta_cache": set(),
    "d1saver._retry": {"d1saver._errors"},
    "d1saver._settings": {"d1saver._errors", "d1saver._ids"},
    "d1saver._envelope": {"d1saver._errors", "d1saver._protocol"},
    "d1saver._client": {"d1saver._envelope", "d1saver._errors", "d1saver._protocol",
                        "d1saver._retry", "d1saver._ids"},
    "d1saver._group_commit": {"d1saver._errors", "d1saver._protocol"},
    "d1saver._driver": {"d1saver._client", "d1saver._group_commit", "d1saver._protocol"},
    "d1saver._values": {"d1saver._codec", "d1saver._errors", "d1saver._crypto",
                        "d1saver._manifest"},
    "d1saver._rows": {"d1saver._sql", "d1saver._errors", "d1saver._protocol", "d1saver._values",
                      "d1saver._crypto"},
    "d1saver._routing": {"d1saver._errors"},
    "d1saver._transfer": {"d1saver._sql", "d1saver._errors", "d1saver._protocol"},
    "d1saver._ids": {"d1saver._errors"},
    "d1saver._serde": set(),
    "d1saver._crypto": {"d1saver._codec", "d1saver._errors"},
    "d1saver._statements": {"d1saver._sql", "d1saver._errors", "d1saver._protocol",
                            "d1saver._values", "d1saver._crypto", "d1saver._manifest"},
    "d1saver._reseal_frozen": {"d1saver._sql", "d1saver._crypto", "d1saver._protocol",
                               "d1saver._rows", "d1saver._values"},
    "d1saver._reseal": {"d1saver._sql", "d1saver._crypto", "d1saver._protocol", "d1saver._rows",
                        "d1saver._values", "d1saver._reseal_frozen", "d1saver._manifest"},
    "d1saver._rewrites": {"d1saver._rows", "d1saver._sql", "d1saver._statements",
                          "d1saver._errors", "d1saver._protocol", "d1saver._values",
                          "d1saver._reseal", "d1saver._crypto"},
    "d1saver._ops": {"d1saver._rows", "d1saver._sql", "d1saver._statements", "d1saver._errors",
                     "d1saver._delta_cache", "d1saver._protocol", "d1saver._values",
                     "d1saver._reseal", "d1saver._crypto", "d1saver._held",
                     "d1saver._rewrites"},
    "d1saver.admin": {"d1saver._sql", "d1saver._statements", "d1saver._protocol",
                      "d1saver._rows", "d1saver._routing", "d1saver._transfer", "d1saver._reseal"},
    "d1saver.cli_support": set(),
}
# The shell and the tools sit on top: anything of d1saver below them, never compaction.
MAX_LINES = 450
SQL_CATALOGUES = {"d1saver/_sql.py"}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of d1saver/compaction that `name` imports (a submodule if named, else the package)."""
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
    """Depth-first search over d1saver/ and compaction/: no module reaches itself."""
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


def test_layers_import_only_downward(graph: dict[str, set[str]]) -> None:
    for module, allowed in LAYERS.items():
        if module in graph:
            extra = {m for m in graph[module] if m.startswith("d1saver")} - allowed
            assert not extra, f"{module} imports {sorted(extra)}, above its layer"


def test_compaction_uses_only_public_d1saver(graph: dict[str, set[str]]) -> None:
    for module, deps in graph.items():
        if module.startswith("compaction"):
            private = [d for d in deps if any(p.startswith("_") for p in d.split(".")[1:])
                       and d.startswith("d1saver")]
            assert not private, f"{module} imports private {private}"


def test_d1saver_does_not_import_compaction(graph: dict[str, set[str]]) -> None:
    for module, deps in graph.items():
        if module.startswith("d1saver"):
            assert not [d for d in deps if d.startswith("compaction")], module


def test_no_product_module_over_limit() -> None:
    long = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            n = len(path.read_text().splitlines())
            if n > MAX_LINES and rel not in SQL_CATALOGUES:
                long[rel] = n
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_cycle_detector_can_fail() -> None:
    """The detector itself: a planted cycle is found."""
    planted = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(AssertionError, match="cycle"):
        test_no_import_cycle(planted)
