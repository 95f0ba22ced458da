"""Shared helpers for the tests: the project tree, subprocess runs, clean copies."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vendorlib.pin import Hunk, Unit, load_pin, load_series
from vendorlib.proc import captured
from vendorlib.sdist import extract_all, obtain

#: The tests' support modules (this folder), the tests, the project.
SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
#: The console scripts of the environment under test (speculators, torchrun, ...).
BIN = Path(sys.executable).parent


def pinned_sdist() -> Path:
    """The verified upstream sdist (downloaded into the cache on first use)."""
    pin = load_pin(ROOT)
    return obtain(pin.name, pin.version, pin.sdist, pin.sha256)


def first_changed_hunk(
    project: Path, *, top_untouched: bool = False
) -> tuple[Unit, Hunk]:
    """The first unit that changes an upstream file, and its first such hunk.

    ``top_untouched``: only in a file whose first line no unit's hunk covers, so
    that lines added at its top shift the units' hunks there without a conflict.
    """
    series = load_series(project)
    top = {h.file for u in series for h in u.hunks() if h.old_start <= 1}
    for unit in series:
        changed = [
            h
            for h in unit.hunks()
            if unit.files()[h.file] == "M" and not (top_untouched and h.file in top)
        ]
        if changed:
            return unit, changed[0]
    raise AssertionError("no unit changes an upstream file")


def clean_copy(dest: Path) -> Path:
    """What a fresh clone of the work tree holds: tracked + untracked, not ignored."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def free_port() -> int:
    """A TCP port nobody listens on right now (for torchrun's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun(target: list[str], nproc: int = 2) -> list[str]:
    """``torchrun`` on one host for ``target`` (a script or ``-m module``, then its
    arguments)."""
    return [
        str(BIN / "torchrun"),
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *target,
    ]


def torchrun_train(
    train_argv: list[str], nproc: int = 2, probe: bool = False
) -> list[str]:
    """``torchrun -m speculators.train ...`` on one host for the arguments of a
    ``speculators train ...`` command line (``train_argv`` without those words).

    With ``probe``, torchrun runs :mod:`distributed_probe` instead (the same
    trainer, which also writes what each rank set up to ``$SPECULATORS_KIMI_PROBE``).
    """
    probed = [str(SUPPORT / "distributed_probe.py")]
    target = probed if probe else ["-m", "speculators.train"]
    return torchrun([*target, *train_argv], nproc)


def run(
    cmd: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; on failure show it in the assertion."""
    proc = captured(cmd, cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n"
            f"--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def console_in_process(
    argv: list[str], monkeypatch: Any, capsys: Any
) -> tuple[Any, str]:
    """``argv`` (``speculators ...``) through the console script's function in this
    process: its exit code and stderr. For a command line that stops before any
    work, where a fresh interpreter's imports would be most of the test's time."""
    from speculators.utils.cli_errors import TRACEBACK_ENV

    from speculators_kimi.console import main

    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", [str(arg) for arg in argv])
    capsys.readouterr()
    try:
        main()
        code: Any = 0
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def vendor(
    project: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``tools/vendor ARGS`` of ``project`` (a clean copy, or the tree itself)."""
    cmd = [sys.executable, str(project / "tools" / "vendor"), *args]
    return run(cmd, env=env, check=check)


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative POSIX path) with its bytes."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def reordered_words(verifier: Path, out: Path) -> Path:
    """A copy of a tiny verifier whose tokenizer numbers its words in reverse:
    every id of its data stays inside the vocabulary and means another word."""
    shutil.copytree(verifier, out)
    spec = json.loads((out / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    words = sorted((w for w in vocab if not w.startswith("<")), key=vocab.get)
    ids = sorted((vocab[w] for w in words), reverse=True)
    vocab.update(zip(words, ids, strict=True))
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out


def edited_copy(ckpt: Path, dest: Path, **changes: object) -> Path:
    """A copy of checkpoint ``ckpt`` at ``dest`` with top-level config fields
    changed."""
    dest.mkdir()
    for item in ckpt.iterdir():
        (dest / item.name).write_bytes(item.read_bytes())
    config = json.loads((dest / "config.json").read_text())
    config.update(changes)
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def export_refusal(
    ckpt: Path, scratch: Path, verifier_id: str, **changes: object
) -> str:
    """Why ``export_draft`` refuses ``ckpt`` (with ``changes`` made to a fresh
    copy under ``scratch`` first), after checking that it wrote nothing."""
    import pytest

    from speculators_kimi.export import ExportError, export_draft

    if changes:
        ckpt = edited_copy(
            ckpt, scratch / f"bad-{len(list(scratch.glob('bad-*')))}", **changes
        )
    with pytest.raises(ExportError) as err:
        export_draft(ckpt, scratch / "never", verifier_id=verifier_id)
    assert not (scratch / "never").exists()
    return str(err.value)


def demo_command(out: Path, *extra: str) -> list[str]:
    """The demo CLI as the session's one trained demo (``trained_demo``) runs it."""
    return [
        sys.executable,
        "-m",
        "speculators_kimi.demo",
        "--out",
        str(out),
        "--num-samples",
        "80",
        "--epochs",
        "3",
        "--json",
        *extra,
    ]


def demo_output(proc: subprocess.CompletedProcess[str]) -> tuple[dict, str]:
    """The demo's ``--json`` report (its whole stdout, nothing else) and its
    progress lines (stderr, where ``--json`` sends them), then the report."""
    return json.loads(proc.stdout), proc.stderr + proc.stdout


def extract_tar(tf: tarfile.TarFile, dest: Path) -> None:
    """Extract a test archive the way the vendoring code extracts an sdist."""
    extract_all(tf, dest, Path(str(tf.name or "archive")))


def unread_flags(
    add_arguments: Callable[[argparse.ArgumentParser], None],
    options_from_args: Callable[[argparse.Namespace], Any],
    **fixed: Any,
) -> tuple[list[str], Any]:
    """A command's flags whose values do not reach its options object, and the
    options: every flag is given a value of its own (``fixed``: those a value
    of its own would not pass) and looked for in the options' ``repr``."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    dests = [a.dest for a in parser._actions if a.dest != "help"]
    values = {d: f"<{d}>" for d in dests} | fixed
    options = options_from_args(argparse.Namespace(**values))
    text = repr(options)
    return [d for d in dests if d not in fixed and f"<{d}>" not in text], options


def rows_dataset(path: Path, rows: list[list[int]]) -> Path:
    """A prepare-data dataset of these token rows, saved in the torch format
    ``prepare-data`` saves (upstream ``preprocessing.py``: ``set_format("torch")``)."""
    from datasets import Dataset

    ds = Dataset.from_dict(
        {
            "input_ids": rows,
            "loss_mask": [[1] * len(r) for r in rows],
            "seq_len": [len(r) for r in rows],
        }
    )
    ds.set_format(type="torch")
    ds.save_to_disk(str(path))
    return path


def parameter_counts(model: Any) -> dict[str, int]:
    """A model's trainable and frozen parameters, under doctor's names."""
    counts = {"trainable_params": 0, "frozen_params": 0}
    for param in model.parameters():
        counts["trainable_params" if param.requires_grad else "frozen_params"] += (
            param.numel()
        )
    return counts


def doctor_report(capsys: Any, *argv: str) -> tuple[int, dict]:
    """``speculators-kimi doctor ARGV --json`` in process: its exit code and its
    report. ``--json`` goes before a ``--`` (what follows it is train's)."""
    from speculators_kimi import cli

    at = argv.index("--") if "--" in argv else len(argv)
    code = cli.main(["doctor", *argv[:at], "--json", *argv[at:]])
    return code, json.loads(capsys.readouterr().out)
