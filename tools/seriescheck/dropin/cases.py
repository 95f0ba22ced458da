"""What the drop-in check does on each tree: the cases, and what runs in the child.

A case is one fresh interpreter's work, named once (``Case.name``). Its result is
a flat dict of JSON values (key -> value), compared key by key across the trees.

- ``api:<package>`` (or ``api:<package>:<name>`` where the package answers names
  lazily, with a module ``__getattr__``): the package is the first `speculators`
  module imported, each public name of it is read, then upstream's API is used as
  its docs use it (`use_api`): registries, ``model_validate`` of config dicts,
  JSON schemas, ``reload_schemas``, and ``from_pretrained`` on base and concrete
  classes for each checkpoint given (``LABEL=PATH``; keys ``checkpoint.LABEL.*``).
- ``cli:<argv>``: the ``speculators`` console script as each tree's users run it
  (upstream's entry point; ours through `speculators_kimi.console`), its exit
  code, stdout and stderr: no arguments, ``--help`` and ``--version`` each in
  its own interpreter (ours answers them without importing the package), then
  ``cli:commands``: every command's ``--help`` and the usage errors upstream
  answers itself, one after another in one interpreter (they share the
  import-first module, the entry point), keyed ``<argv>:exit`` and so on.
- ``run:<name>``: an upstream command that writes a dataset on CPU (``{out}`` in
  its argv is a fresh folder), given by the caller with its inputs: its exit
  code and what it wrote (files, rows, a digest per column).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The commands whose ``--help`` is compared (ours and upstream's; a command only
#: one tree has shows as a difference, which a unit must state).
COMMANDS = (
    "prepare-data",
    "stitch-mtp",
    "generate-offline-data",
    "regenerate-responses",
    "train",
    "convert",
    "launch-vllm",
)

#: Command lines upstream answers itself (usage errors), compared byte for byte.
USAGE_ERRORS: tuple[tuple[str, ...], ...] = (
    ("no-such-command",),
    ("prepare-data",),
    ("prepare-data", "--no-such-option"),
    ("prepare-data", "--max-samples", "many"),
    ("convert",),
    ("generate-offline-data", "--no-such-option"),
)

#: Every registered type's name, validated from a minimal dict through the base
#: config class (the polymorphic dispatch a loaded ``config.json`` goes through).
MODEL_TYPES = ("eagle3", "dflash", "dflash2", "dspark", "mtp", "peagle", "xpress")


@dataclass(frozen=True)
class Case:
    """One fresh interpreter: an import-first API use, or one command line."""

    name: str
    package: str = ""
    names: tuple[str, ...] = ()
    argvs: tuple[tuple[str, ...], ...] = ()
    checkpoints: tuple[str, ...] = field(default=())

    @property
    def kind(self) -> str:
        return self.name.split(":", 1)[0]


def public_packages(src: Path) -> dict[str, tuple[list[str], bool]]:
    """Each package under ``src/speculators`` -> (its ``__all__``, answers lazily).

    Read from source (``ast``), nothing imported. "Answers lazily" is a module
    ``__getattr__``: then which name is read first can change what is imported.
    """
    found: dict[str, tuple[list[str], bool]] = {}
    top = src / "speculators"
    for init in sorted(top.rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        package = ".".join(init.parent.relative_to(src).parts)
        tree = ast.parse(init.read_text(encoding="utf-8"))
        names: list[str] = []
        lazy = False
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                lazy = True
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                names = [str(n) for n in ast.literal_eval(node.value)]
        found[package] = (names, lazy)
    return found


def api_cases(srcs: list[Path], checkpoints: list[str]) -> list[Case]:
    """One case per package of any tree (per name where a tree's is lazy)."""
    packages: dict[str, tuple[set[str], bool]] = {}
    for src in srcs:
        for package, (names, lazy) in public_packages(src).items():
            have, was_lazy = packages.get(package, (set(), False))
            packages[package] = (have | set(names), was_lazy or lazy)
    cases = []
    for package, (all_names, lazy) in sorted(packages.items()):
        ordered = tuple(sorted(all_names))
        groups = [(f":{n}", (n,)) for n in ordered] if lazy else [("", ordered)]
        for suffix, first in groups:
            rest = first + tuple(n for n in ordered if n not in first)
            cases.append(
                Case(f"api:{package}{suffix}", package, rest, (), tuple(checkpoints))
            )
    return cases


def _label(argv: tuple[str, ...]) -> str:
    return " ".join(argv) or "(no arguments)"


def cli_cases() -> list[Case]:
    """Top-level help and version, each alone; the commands' help and errors."""
    top: list[tuple[str, ...]] = [(), ("--help",), ("--version",)]
    commands = [(command, "--help") for command in COMMANDS] + list(USAGE_ERRORS)
    return [Case(f"cli:{_label(argv)}", argvs=(argv,)) for argv in top] + [
        Case("cli:commands", argvs=tuple(commands))
    ]


# --- in the child -------------------------------------------------------------


def _error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def _probe(out: dict[str, Any], key: str, fn: Any) -> Any:
    """``out[key]`` = what ``fn()`` gives (or the error it raises)."""
    try:
        value = fn()
    except Exception as err:  # the error is the result
        out[key] = {"error": _error(err)}
        return None
    out[key] = value
    return value


def _schema_summary(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.get("$defs", {})
    return {
        "defs": sorted(defs),
        "properties": {
            name: sorted(d.get("properties", {})) for name, d in defs.items()
        },
        "top": sorted(schema.get("properties", {})),
        "any_of": len(schema.get("anyOf", schema.get("oneOf", []))),
    }


def _weights_digest(model: Any) -> dict[str, Any]:
    """The loaded model's class, state keys and a digest of every tensor's bytes."""
    import torch

    digest = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().contiguous().cpu()
        digest.update(key.encode())
        digest.update(tensor.view(-1).view(dtype=torch.uint8).numpy())
    return {
        "class": type(model).__name__,
        "keys": sorted(state),
        "sha256": digest.hexdigest(),
    }


def use_api(case: Case) -> dict[str, Any]:
    """Import the case's package first, read its first name, use upstream's API."""
    out: dict[str, Any] = {}
    module = importlib.import_module(case.package)
    # The first name only: reading every name up front could import what the
    # usage below should find imported (or not) by the package itself.
    first = case.names[:1]
    if first:
        _probe(
            out, f"name.{first[0]}", lambda: type(getattr(module, first[0])).__name__
        )
    from speculators import SpeculatorModel, SpeculatorModelConfig, reload_schemas

    out["registry.models"] = sorted(SpeculatorModel.registry or {})
    out["registry.configs"] = sorted(SpeculatorModelConfig.registry or {})
    for model_type in MODEL_TYPES:
        _probe(
            out,
            f"validate.{model_type}",
            lambda t=model_type: (
                type(
                    SpeculatorModelConfig.model_validate({"speculators_model_type": t})
                ).__name__
            ),
        )
    _probe(
        out,
        "validate.eagle3_llama",
        lambda: (
            type(
                SpeculatorModelConfig.model_validate(
                    {
                        "speculators_model_type": "eagle3",
                        "transformer_layer_config": {"model_type": "llama"},
                    }
                )
            ).__name__
        ),
    )
    _probe(
        out,
        "schema",
        lambda: _schema_summary(SpeculatorModelConfig.model_json_schema()),
    )
    _probe(out, "reload_schemas", lambda: reload_schemas() or "ok")
    _probe(
        out,
        "schema.after_reload",
        lambda: _schema_summary(SpeculatorModelConfig.model_json_schema()),
    )
    for labelled in case.checkpoints:
        label, _, ckpt = labelled.partition("=")
        use_checkpoint(out, f"checkpoint.{label}", ckpt)
    out["names.missing"] = [n for n in case.names if not hasattr(module, n)]
    return out


def use_checkpoint(out: dict[str, Any], tag: str, ckpt: str) -> None:
    """A trained checkpoint through upstream's documented classes, base and concrete."""
    from speculators import SpeculatorModel, SpeculatorModelConfig
    from speculators.models import Eagle3DraftModel, Eagle3SpeculatorConfig

    config_dict = json.loads((Path(ckpt) / "config.json").read_text())
    _probe(
        out,
        f"{tag}.validate",
        lambda: type(SpeculatorModelConfig.model_validate(config_dict)).__name__,
    )
    for cls in (SpeculatorModelConfig, Eagle3SpeculatorConfig):
        _probe(
            out,
            f"{tag}.{cls.__name__}.from_pretrained",
            lambda c=cls: type(c.from_pretrained(ckpt)).__name__,
        )
    for cls in (SpeculatorModel, Eagle3DraftModel):
        _probe(
            out,
            f"{tag}.{cls.__name__}.from_pretrained",
            lambda c=cls: _weights_digest(c.from_pretrained(ckpt)),
        )


def _console_entry(tree: str) -> Any:
    """The ``speculators`` console script's function, as each tree installs it."""
    if tree == "pristine":
        return importlib.import_module("speculators.__main__").app
    return importlib.import_module("speculators_kimi.console").main


def _run_argv(argv: tuple[str, ...], tree: str) -> dict[str, Any]:
    """``speculators ARGV`` in this process: exit code, stdout, stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["speculators", *argv]
        # As a console script runs it: click names the program after argv[0]
        # unless __main__ is a package's (as under `python -m`).
        sys.modules["__main__"].__package__ = None
        try:
            _console_entry(tree)()
            code: Any = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(bool(stop.code))
        except BaseException as raised:  # a traceback is a result too
            code = f"raised {_error(raised)}"
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        streams = []
        for f in (out, err):
            f.seek(0)
            streams.append(f.read().decode("utf-8", "replace"))
    return {"exit": code, "stdout": streams[0], "stderr": streams[1]}


def run_cli(case: Case, tree: str) -> dict[str, Any]:
    """Each command line of the case; keys prefixed with it when there are several."""
    if len(case.argvs) == 1:
        return _run_argv(case.argvs[0], tree)
    out: dict[str, Any] = {}
    for argv in case.argvs:
        for key, value in _run_argv(argv, tree).items():
            out[f"{_label(argv)}:{key}"] = value
    return out


def _dataset_rows(path: Path) -> dict[str, Any]:
    """What a prepared dataset holds: files, row count, a digest per column."""
    from datasets import load_from_disk

    files = sorted(
        p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()
    )
    if not (path / "dataset_info.json").is_file():
        return {"files": files}
    dataset = load_from_disk(str(path)).with_format(None)
    columns = {
        name: hashlib.sha256(
            json.dumps(list(dataset[name]), default=str).encode()
        ).hexdigest()
        for name in dataset.column_names
    }
    return {"files": files, "rows": len(dataset), "columns": columns}


def run_command(case: Case, tree: str) -> dict[str, Any]:
    """A command that writes a dataset (``{out}`` in its argv): exit and rows.

    Its logs hold timings, so only the exit code and what it wrote compare.
    """
    out = tempfile.mkdtemp(prefix="dropin-run-")
    argv = tuple(a.replace("{out}", out) for a in case.argvs[0])
    result = _run_argv(argv, tree)
    return {"exit": result["exit"], "output": _dataset_rows(Path(out))}


def run_case(case: Case, tree: str) -> dict[str, Any]:
    """The case's result on this process's tree (``pristine`` or ours)."""
    if case.kind == "api":
        return use_api(case)
    if case.kind == "run":
        return run_command(case, tree)
    return run_cli(case, tree)
