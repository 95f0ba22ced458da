"""The package's imports run one way: no cycle between its modules, no import of
the root command line from a subcommand, and nothing imported from ``tools/``.

Read from the source with ``ast`` (every import, at module level or inside a
function, since a lazy import is still an arrow; not the ``python -m`` entry
point of a module, under ``if __name__ == "__main__":``, the top of the graph).
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "speculators_kimi"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_script_entry(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's ``modules`` that ``path`` imports (resolved, absolute)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    tree.body = [n for n in tree.body if not _is_script_entry(n)]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            # "from . import store": the submodule is what is imported.
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    files = list(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {
        _module_name(p): _imports(p, modules)
        for p in files
        if p.name != "__main__.py"  # entry points: the top of the graph
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle between modules, ignoring a package's ``__init__`` re-exports."""
    edges = {
        m: {d for d in deps if not m.startswith(f"{d}.")} for m, deps in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_in_the_package():
    assert _cycle(_graph()) is None


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "a.x": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]


def test_subcommands_do_not_import_the_root_command_line():
    importers = sorted(
        m for m, deps in _graph().items() if "speculators_kimi.cli" in deps
    )
    assert importers == []


#: The commands: the fixture package sits below them and imports none.
COMMANDS = ("datagen", "evaluate", "doctor", "export", "vllm_check", "demo")


def _is_command(module: str) -> bool:
    return any(
        module == f"speculators_kimi.{c}" or module.startswith(f"speculators_kimi.{c}.")
        for c in COMMANDS
    )


def test_the_fixture_package_imports_no_command():
    """``tiny_verifier`` builds the fixtures the commands are tested on, so it
    must not depend on them (its ``python -m`` entry point, the top of the
    graph, may)."""
    graph = _graph()
    fixture = [
        m for m in graph if m.split(".")[:2] == ["speculators_kimi", "tiny_verifier"]
    ]
    assert "speculators_kimi.tiny_verifier.dataset" in fixture
    imported = {m: sorted(d for d in graph[m] if _is_command(d)) for m in fixture}
    assert {m: deps for m, deps in imported.items() if deps} == {}


def _imported(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports (anywhere in it)."""
    return {
        name.split(".")[0]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
    }


def test_nothing_reaches_into_tools():
    """Build facts come from ``_build_info.py`` (written by the build), not from
    importing ``tools/`` through ``sys.path``."""
    for path in PACKAGE.rglob("*.py"):
        assert not _imported(path) & {"vendorlib", "seriescheck"}, path
        assert "sys.path.insert" not in path.read_text(), path


def test_the_series_code_never_imports_its_test_tooling():
    """`vendorlib` (the pin, the units, git: what the build backend loads) imports
    `seriescheck` (test-series, dropin) nowhere; the dependency runs one way."""
    tools = ROOT / "tools"
    for path in (tools / "vendorlib").rglob("*.py"):
        assert "seriescheck" not in _imported(path), path
    assert "vendorlib" in _imported(tools / "seriescheck" / "stepwise.py")
