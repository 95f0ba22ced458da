"""The drop-in, side by side: pristine 0.9.0 and the install, used as upstream's
docs use them (tools/seriescheck/dropin), and the check's own logic.

One forkserver (module fixture) runs every case on three trees: the pinned
release (its `src/` first on ``sys.path``), the install, and a copy of the
install whose `speculators/__init__.py` imports its names lazily (the landed
regression of unit 0021, rebuilt here from the real file) to show the check
fails where it should. The API cases load both demo checkpoints our trainer
wrote; ``run:prepare-data`` runs upstream's prepare-data on both trees against
one stand-in of vLLM's render endpoint (unit 0013's, written from vLLM's
``chat_utils``).
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run
from seriescheck.dropin.cases import Case
from seriescheck.dropin.check import installed_src, run_cases, select_cases
from seriescheck.dropin.compare import (
    Intended,
    compare,
    load_intended,
    report,
)
from vendorlib.pin import load_series
from vendorlib.sdist import extract

from speculators_kimi.tiny_verifier import TinyVerifierSpec, build_verifier
from speculators_kimi.tiny_verifier.dataset import write_conversations

SERIES = [u.name for u in load_series(ROOT)]
#: The cases the lazy copy runs: a public name of the package read first.
LAZY_CASES = ["api:speculators:SpeculatorModel", "api:speculators:Eagle3DraftModel"]


def lazy_init(text: str) -> str:
    """``speculators/__init__.py`` with each public name imported on first use."""
    tree = ast.parse(text)
    where = {
        alias.asname or alias.name: "." * node.level + (node.module or "")
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    return (
        "from importlib import import_module\n\n"
        f"_WHERE = {where!r}\n__all__ = sorted(_WHERE)\n\n\n"
        "def __getattr__(name):\n"
        "    if name not in _WHERE:\n"
        "        raise AttributeError(name)\n"
        "    value = getattr(import_module(_WHERE[name], __name__), name)\n"
        "    globals()[name] = value\n"
        "    return value\n"
    )


def _render_server():
    path = ROOT / ".vendored" / "tests" / "unit" / "mock" / "render_server.py"
    spec = importlib.util.spec_from_file_location("render_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def side_by_side(trained_demo, trained_mla_demo, upstream_sdist, tmp_path_factory):
    """Every case's result on ``pristine``, ``ours`` (the install) and ``lazy``."""
    from transformers import AutoTokenizer

    work = tmp_path_factory.mktemp("dropin")
    pristine = extract(upstream_sdist, work / "pristine")
    lazy = work / "lazy"
    shutil.copytree(
        installed_src(sys.executable),
        lazy / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    init = lazy / "src" / "speculators" / "__init__.py"
    init.write_text(lazy_init(init.read_text()))

    spec = TinyVerifierSpec(num_samples=6)
    verifier = build_verifier(spec, work / "verifier")
    conversations = [
        [
            {"role": "user", "content": f"w{i} w{i + 1} w{i + 2}"},
            {"role": "assistant", "content": f"w{i + 7} w{i + 8} w{i + 9}"},
        ]
        for i in range(6)
    ]
    data = write_conversations(conversations, work / "conv.jsonl")
    mla = Path(trained_mla_demo["checkpoint"])
    checkpoints = {"kimi": Path(trained_demo["checkpoint"]), "mla": mla}
    with _render_server().serve_render(AutoTokenizer.from_pretrained(verifier)) as (
        url,
        _,
    ):
        prepare = Case(
            "run:prepare-data",
            argvs=(
                (
                    "prepare-data",
                    *("--model", str(verifier), "--data", str(data)),
                    *("--output", "{out}", "--render-endpoint", url),
                    *("--seq-length", "128", "--num-preprocessing-workers", "1"),
                ),
            ),
        )
        cases = select_cases(
            [pristine / "src", installed_src(sys.executable)],
            checkpoints,
            ("api", "cli"),
        )
        cases += [
            prepare,
            *(Case(n, "speculators", (n.split(":")[-1],)) for n in LAZY_CASES),
        ]
        standard = [c.name for c in cases if c.name not in LAZY_CASES]
        return run_cases(
            sys.executable,
            {"pristine": pristine, "ours": None, "lazy": lazy},
            cases,
            jobs=2,
            discover=["pristine", "ours"],
            only={"ours": standard, "lazy": LAZY_CASES},
        )


def test_the_install_behaves_as_pristine_but_for_stated_differences(side_by_side):
    """API, checkpoints, help and usage errors, prepare-data: all as pristine's."""
    pristine, ours = side_by_side["pristine"], side_by_side["ours"]
    run_pristine = {k: v for k, v in pristine.items() if k not in LAZY_CASES}
    result = compare(
        run_pristine, ours, load_intended(ROOT / "upstream_patches", SERIES)
    )
    assert result.ok, report(result)
    # What the comparison stood on: every model registered, dispatch typed,
    # the demo checkpoint loaded with the same weights, rows written.
    api = ours["api:speculators"]["ok"]
    assert "eagle3" in api["registry.models"]
    assert api["validate.eagle3_llama"] == "Eagle3SpeculatorConfig"
    kimi = api["checkpoint.kimi.SpeculatorModel.from_pretrained"]
    assert kimi["class"] == "Eagle3DraftModel"
    assert (
        kimi
        == pristine["api:speculators"]["ok"][
            "checkpoint.kimi.SpeculatorModel.from_pretrained"
        ]
    )
    rows = ours["run:prepare-data"]["ok"]
    assert rows["exit"] == 0 and rows["output"]["rows"] == 6, rows


def test_the_check_catches_a_lazy_package(side_by_side):
    """The landed regression (names imported on first use) fails the check."""
    pristine = {k: side_by_side["pristine"][k] for k in LAZY_CASES}
    result = compare(
        pristine, side_by_side["lazy"], load_intended(ROOT / "upstream_patches", SERIES)
    )
    found = {(f.case, f.key) for f in result.findings}
    # A name from `speculators.model` first: no model registered, dicts not typed.
    assert ("api:speculators:SpeculatorModel", "registry.models") in found
    assert ("api:speculators:SpeculatorModel", "validate.eagle3_llama") in found
    # A model class first registers every model, but the schemas were never
    # reloaded: a config dict still validates to a plain dict.
    assert ("api:speculators:Eagle3DraftModel", "registry.models") not in found
    assert ("api:speculators:Eagle3DraftModel", "validate.eagle3_llama") in found


def _intended(**kw) -> Intended:
    base = {"unit": "0001-u", "cases": ["c"], "keys": ["k"], "changes": [], "why": "w"}
    return Intended(**{**base, **kw})


@pytest.mark.parametrize(
    ("pristine", "ours", "changes", "findings", "stale"),
    [
        ("a b c", "a b c", ["\\+x"], 0, 1),  # allows nothing seen: stale
        ("a b c", "a x b c", ["\\+x"], 0, 0),
        ("a b c", "a x b c", ["\\+y"], 1, 1),
        ("a b c", "a b", ["\\+c"], 1, 1),  # a removal is not an addition
        ("a b c", "a --p one --q two b c", ["\\+--p one", "\\+--q two"], 0, 0),
        # JSON is compared as its indented text's words ("2," then "3").
        ({"n": [1, 2]}, {"n": [1, 2, 3]}, ["-2", "\\+2, 3"], 0, 0),
    ],
)
def test_compare_allows_only_the_stated_words(pristine, ours, changes, findings, stale):
    result = compare(
        {"c": {"ok": {"k": pristine}}},
        {"c": {"ok": {"k": ours}}},
        [_intended(changes=changes)],
    )
    assert (len(result.findings), len(result.stale)) == (findings, stale)


def test_compare_a_case_that_failed_whole_is_one_value():
    result = compare(
        {"c": {"error": "ModuleNotFoundError: x"}}, {"c": {"ok": {"k": 1}}}, []
    )
    assert [(f.key, f.change) for f in result.findings] == [
        ("(case)", "-error: ModuleNotFoundError: x"),
        ("(case)", "+ok"),
    ]


def test_intended_differences_name_units_of_the_series(tmp_path):
    patches = tmp_path / "upstream_patches"
    patches.mkdir()
    (patches / "0001-u.patch").write_text("")  # a unit is one git format-patch file
    entry = 'unit = "{}"\ncases = ["c"]\nkeys = ["k"]\nchanges = []\nwhy = "w"\n'
    (patches / "INTENDED_DIFFERENCES.toml").write_text(
        "[[difference]]\n" + entry.format("0001-u")
    )
    assert [e.unit for e in load_intended(patches, ["0001-u"])] == ["0001-u"]
    assert load_intended(patches, []) == []  # a unit not applied states nothing
    (patches / "INTENDED_DIFFERENCES.toml").write_text(
        "[[difference]]\n" + entry.format("0009-gone")
    )
    with pytest.raises(ValueError, match="0009-gone"):
        load_intended(patches, ["0001-u"])


def test_the_console_answers_version_and_help_without_torch():
    """`speculators --version`/`--help` enter through speculators_kimi.console."""
    code = (
        "import sys\n"
        "from speculators_kimi.console import main\n"
        "for argv in (['--version'], ['--help']):\n"
        "    sys.argv = ['speculators', *argv]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "print('loaded:', *heavy)\n"
    )
    out = run([sys.executable, "-c", code]).stdout
    assert "speculators version: " in out
    assert "prepare-data" in out
    assert out.splitlines()[-1] == "loaded:"
