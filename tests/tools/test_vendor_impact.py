"""Which upstream test files a unit's tree runs (`seriescheck.impact`): the imports
a real pytest run records per test file, and the files a change then selects."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import ROOT, run
from seriescheck.impact import EVERYTHING, affected, affected_since

RECORD = """
import sys
from pathlib import Path
from seriescheck.impact import ImportRecorder
import pytest

tree = Path.cwd()
recorder = ImportRecorder({str(tree / "src"): "src/", str(tree): ""}, tree / "d.json")
recorder.install()
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests"], plugins=[recorder]))
"""

TREE = {
    "src/pkg/__init__.py": "",
    "src/pkg/a.py": "A = 1\n",
    "src/pkg/b.py": "B = 2\n",
    "src/pkg/c.py": "C = 3\n",
    # imports pkg.c by name, and only when called
    "src/pkg/registry.py": (
        "import importlib\n\n\ndef load(name):\n"
        "    return importlib.import_module(f'pkg.{name}')\n"
    ),
    "tests/conftest.py": "",
    "tests/test_a.py": "from pkg import a\n\n\ndef test_a():\n    assert a.A == 1\n",
    "tests/test_b.py": "import pkg.b\n\n\ndef test_b():\n    assert pkg.b.B == 2\n",
    "tests/test_dynamic.py": (
        "from pkg.registry import load\n\n\n"
        "def test_c():\n    assert load('c').C == 3\n"
    ),
    # a module that does not exist yet: a unit that adds it changes this run
    "tests/test_optional.py": (
        "def test_optional():\n    try:\n        import pkg.later  # noqa: F401\n"
        "    except ImportError:\n        pass\n"
    ),
    "tests/test_process.py": (
        "import subprocess, sys\n\n\ndef test_child():\n"
        "    subprocess.run([sys.executable, '-c', 'import pkg.b'], check=True)\n"
    ),
}


def recorded(tmp_path: Path) -> dict[str, list[str]]:
    for rel, text in TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {"PYTHONPATH": f"{ROOT / 'tools'}:{tmp_path / 'src'}"}
    run([sys.executable, "-c", RECORD], cwd=tmp_path, env=env)
    return json.loads((tmp_path / "d.json").read_text())


def test_a_change_selects_the_test_files_whose_run_can_see_it(tmp_path):
    deps = recorded(tmp_path)
    files = sorted(deps)
    assert files == [t for t in sorted(TREE) if t.startswith("tests/test")]
    assert "src/pkg/a.py" in deps["tests/test_a.py"]
    assert "src/pkg/b.py" not in deps["tests/test_a.py"]
    assert (
        deps["tests/test_process.py"] == [EVERYTHING]
        or EVERYTHING in (deps["tests/test_process.py"])
    )

    def chosen(*touched: str) -> list[str]:
        return affected(deps, files, set(touched))[0]

    assert chosen("src/pkg/a.py") == ["tests/test_a.py", "tests/test_process.py"]
    assert chosen("src/pkg/b.py") == ["tests/test_b.py", "tests/test_process.py"]
    # pkg.c is imported by name (importlib), at run time only: still seen.
    assert chosen("src/pkg/c.py") == [
        "tests/test_dynamic.py",
        "tests/test_process.py",
    ]
    # a module a test asked for and did not find, once a unit adds it
    assert "tests/test_optional.py" in chosen("src/pkg/later.py")
    assert chosen("src/other/x.py") == ["tests/test_process.py"]
    # every test file may see these
    for wide in ("tests/conftest.py", "pyproject.toml", "src/pkg/data.json"):
        picked, why = affected(deps, files, {wide})
        assert picked == files and why == f"touches {wide}: everything"
    # a test file with no record (new, or its run died) always runs
    assert chosen("src/pkg/a.py", "src/zzz.py") == chosen("src/pkg/a.py")
    assert (
        "tests/test_new.py" in affected(deps, [*files, "tests/test_new.py"], set())[0]
    )


def test_the_reason_names_what_the_tests_import():
    deps = {"tests/test_a.py": ["src/pkg/a.py", "tests/test_a.py"]}
    assert affected(deps, ["tests/test_a.py"], {"src/pkg/a.py", "src/pkg/z.py"}) == (
        ["tests/test_a.py"],
        "touches src/pkg/a.py",
    )
    assert affected(deps, ["tests/test_a.py"], {"src/pkg/z.py"}) == (
        [],
        "none imports what it touches (1 file)",
    )


def test_each_file_is_judged_from_the_tree_that_recorded_it():
    """Trees end out of order in the pool: a file recorded on tree 1 is judged by
    what units 2..k touch, one recorded on tree 3 by units 4..k only."""
    touched = {2: {"src/pkg/a.py"}, 3: set(), 4: {"src/pkg/b.py"}}
    recorded = {
        "tests/test_a.py": (1, ["src/pkg/a.py"]),
        "tests/test_a2.py": (3, ["src/pkg/a.py"]),
        "tests/test_b.py": (3, ["src/pkg/b.py"]),
    }
    files = [*recorded, "tests/test_new.py"]
    picked, why = affected_since(
        recorded,
        files,
        lambda tree: set().union(*(touched[u] for u in range(tree + 1, 5))),
    )
    assert picked == ["tests/test_a.py", "tests/test_b.py", "tests/test_new.py"]
    assert why == (
        "no imports recorded yet; touches src/pkg/a.py; touches src/pkg/b.py"
    )
