"""End-to-end EAGLE-3 demo on an embedded tiny Kimi-K2.5-shaped verifier (CPU ok).

``speculators-kimi demo [--out DIR]`` runs, offline:

1. ``verifier``: builds a tiny random-weight Kimi-K2.5-shaped checkpoint (nested
   ``kimi_k25`` config, DeepSeek-V3 MLA + MoE text model under ``language_model.``,
   a vision tower that is ignored, a tokenizer with a chat template);
2. ``data``: tokenizes the shipped conversations with the chat template (loss on
   assistant turns) and runs upstream's ``speculators prepare-data`` on them;
3. ``hidden-states``: our ``generate-hidden-states`` (transformers, text model);
4. ``train``: upstream's ``speculators train`` (EAGLE-3, 3 TTT steps);
5. reloads the draft with ``speculators.SpeculatorModel.from_pretrained`` and
   prints a report.

Each finished stage leaves a marker in ``DIR/.stages`` that records its inputs:
the settings it depends on and the fingerprint of the stage before it. A rerun
reuses a stage whose inputs are unchanged and redoes one whose inputs changed,
together with every stage after it (their outputs are removed first, so old and
new results never mix); ``--fresh`` starts over. An interrupted stage that is run
again with unchanged inputs continues where it stopped (training resumes from its
last checkpoint); with changed inputs it starts over.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "DemoSettings",
    "load_conversations",
    "main",
    "run_demo",
    "train_argv",
]

DATASET = "demo_conversations.jsonl"
_LOSS = re.compile(r"train/loss=([-+0-9.e]+|nan|inf)")


@dataclass
class DemoSettings:
    """Knobs of the demo (the defaults are the documented run)."""

    out: Path = Path("kimi-eagle3-demo")
    num_samples: int | None = None  # all shipped conversations
    epochs: int = 6
    max_steps: int | None = None
    total_seq_len: int = 256
    lr: float = 3e-3
    train_data_ratio: float = 0.9
    dtype: str = "bfloat16"
    extra_train_args: list[str] = field(default_factory=list)
    fresh: bool = False
    train: bool = True  # False: stop after the hidden states


def _dataset_text() -> str:
    return resources.files("speculators_kimi").joinpath("data", DATASET).read_text()


def load_conversations(limit: int | None = None) -> list[list[dict[str, str]]]:
    """The conversations shipped with the package (``speculators_kimi/data``)."""
    text = _dataset_text()
    convs = [json.loads(line)["conversations"] for line in text.splitlines() if line]
    return convs[:limit] if limit else convs


def _say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _changes(old: Any, new: Any, key: str = "") -> list[str]:
    """``key old -> new`` for each setting that differs (nested keys dotted)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in [*new, *(k for k in old if k not in new)]:
            sub = f"{key}.{k}" if key else k
            if k == "upstream" and not key:
                if old.get(k) != new.get(k):
                    stage = str(new.get(k) or old.get(k)).split(":", 1)[0]
                    out.append(f"{stage} result changed")
            elif k not in old or k not in new:
                was, now = (repr(d[k]) if k in d else "unset" for d in (old, new))
                out.append(f"{sub} {was} -> {now}")
            else:
                out += _changes(old[k], new[k], sub)
        return out
    return [] if old == new else [f"{key or 'inputs'} {old!r} -> {new!r}"]


@dataclass
class _Stage:
    """One stage: what it depends on, what it writes, how it runs."""

    name: str
    inputs: dict[str, Any]  # the settings that affect its result
    outputs: tuple[Path, ...]  # removed when it is redone
    fn: Callable[[], dict[str, Any] | None]


class _Stages:
    """Runs stages in order, reusing those whose recorded inputs are unchanged.

    ``.stages/NAME`` (written when a stage finishes) holds its ``inputs`` (its
    settings plus ``upstream``, the previous stage's fingerprint), its
    ``result`` and its ``fingerprint``; ``.stages/NAME.started`` holds the
    inputs of a run that has not finished (yet).
    """

    def __init__(self, out: Path, stages: Sequence[_Stage]) -> None:
        self.dir = out / ".stages"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stages = list(stages)
        self.planned = {st.name for st in self.stages}

    def _read(self, file: str) -> dict[str, Any] | None:
        path = self.dir / file
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, file: str, data: dict[str, Any]) -> None:
        tmp = self.dir / f".{file}.tmp"
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.dir / file)

    def _leftovers(self, stage: _Stage) -> bool:
        files = (self.dir / stage.name, self.dir / f"{stage.name}.started")
        return any(p.exists() for p in (*files, *stage.outputs))

    def _discard(self, stages: Sequence[_Stage]) -> None:
        for stage in stages:
            (self.dir / stage.name).unlink(missing_ok=True)
            (self.dir / f"{stage.name}.started").unlink(missing_ok=True)
            for path in stage.outputs:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)

    def _redo_note(self, stages: Sequence[_Stage]) -> str:
        now = [st.name for st in stages if st.name in self.planned]
        later = [
            st.name
            for st in stages
            if st.name not in self.planned and self._leftovers(st)
        ]
        note = f"redoing {', '.join(now)}"
        return note + (f"; discarding {', '.join(later)}" if later else "")

    def _inputs(self, index: int) -> dict[str, Any]:
        inputs = dict(self.stages[index].inputs)
        if index > 0:
            before = self.stages[index - 1]
            marker = self._read(before.name) or {}
            inputs["upstream"] = f"{before.name}:{marker.get('fingerprint')}"
        return json.loads(json.dumps(inputs))  # as it reads back from a marker

    def run(self, name: str) -> dict[str, Any]:
        """Reuse stage ``name`` if its inputs are unchanged, else (re)do it."""
        index = next(i for i, st in enumerate(self.stages) if st.name == name)
        stage, after = self.stages[index], self.stages[index + 1 :]
        inputs = self._inputs(index)
        marker = self._read(name)
        started = self._read(f"{name}.started")
        if marker is not None:
            if marker.get("inputs") == inputs:
                _say(f"stage {name}: done before, reusing")
                return dict(marker.get("result") or {})
            if "inputs" not in marker:
                why = "no recorded inputs: made by an older demo"
            else:
                why = "; ".join(_changes(marker["inputs"], inputs))
            _say(f"{name}: inputs changed ({why}); {self._redo_note([stage, *after])}")
            self._discard([stage, *after])
        elif started is not None and started.get("inputs") == inputs:
            _say(f"stage {name}: resuming an unfinished run (inputs unchanged)")
            self._discard(after)
        elif started is not None:
            why = "; ".join(_changes(started.get("inputs") or {}, inputs))
            _say(
                f"{name}: inputs changed since an unfinished run ({why}); "
                f"{self._redo_note([stage, *after])}"
            )
            self._discard([stage, *after])
        else:
            if self._leftovers(stage):
                _say(
                    f"{name}: outputs without recorded inputs; "
                    f"{self._redo_note([stage, *after])}"
                )
            self._discard([stage, *after])
        _say(f"stage {name}: running")
        self._write(f"{name}.started", {"inputs": inputs})
        t0 = time.perf_counter()
        result = stage.fn() or {}
        seconds = round(time.perf_counter() - t0, 1)
        record = {
            "inputs": inputs,
            "result": result,
            "fingerprint": _digest({"stage": name, "inputs": inputs, "result": result}),
            "seconds": seconds,
        }
        self._write(name, record)
        (self.dir / f"{name}.started").unlink(missing_ok=True)
        _say(f"stage {name}: finished in {seconds} s")
        return dict(result)

    def run_all(self, last: str) -> dict[str, dict[str, Any]]:
        """Run (or reuse) the stages up to ``last``; their results by name."""
        names = [st.name for st in self.stages]
        self.planned = set(names[: names.index(last) + 1])
        return {name: self.run(name) for name in names if name in self.planned}


def _offline_env() -> dict[str, str]:
    return dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )


def train_argv(verifier: Path, data: Path, run_dir: Path, s: DemoSettings) -> list[str]:
    """``speculators train`` arguments (after the ``speculators train`` words)."""
    argv = [
        "--verifier-name-or-path",
        str(verifier),
        "--data-path",
        str(data),
        "--speculator-type",
        "eagle3",
        "--total-seq-len",
        str(s.total_seq_len),
        "--train-data-ratio",
        str(s.train_data_ratio),
        "--epochs",
        str(s.epochs),
        "--lr",
        str(s.lr),
        "--scheduler-type",
        "none",
        "--num-workers",
        "0",
        "--on-missing",
        "raise",
        "--log-freq",
        "1",
        "--save-path",
        str(run_dir / "checkpoints"),
        "--log-dir",
        str(run_dir / "logs"),
    ]
    if s.max_steps is not None:
        argv += ["--max-steps", str(s.max_steps)]
    return argv + list(s.extra_train_args)


def _stream(cmd: list[str], log: Path) -> str:
    """Run ``cmd`` showing its output live; return the output (also in ``log``)."""
    _say("+ " + shlex.join(cmd))
    chunks: list[str] = []
    with log.open("a") as sink:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_offline_env(),
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sink.write(line)
            chunks.append(line)
        rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"command failed ({rc}): {shlex.join(cmd)}; log: {log}")
    return "".join(chunks)


def _last_checkpoint(checkpoints: Path) -> Path:
    numbered = [p for p in checkpoints.iterdir() if p.is_dir() and p.name.isdigit()]
    if not numbered:
        raise FileNotFoundError(f"no checkpoint under {checkpoints}")
    return max(numbered, key=lambda p: int(p.name))


def run_demo(s: DemoSettings) -> dict[str, Any]:
    """Run every stage (reusing finished ones); return the report as a dict."""
    from .datagen import HS_DIRNAME, generate_hidden_states
    from .tiny_verifier import (
        KimiTinySpec,
        build_kimi_tiny,
        prepare_data,
        write_conversations,
    )

    out = s.out.resolve()
    if s.fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    verifier, data, run_dir = out / "verifier", out / "data", out / "run"
    jsonl = out / "conversations.jsonl"
    spec = KimiTinySpec()
    dataset = hashlib.sha256(_dataset_text().encode()).hexdigest()[:16]
    all_convs = load_conversations()
    convs = load_conversations(s.num_samples)
    t_start = time.perf_counter()

    def build_verifier() -> dict[str, Any]:
        # Every shipped conversation's words, whatever --num-samples says: the
        # verifier does not change with the sample count (a subset's words are a
        # prefix of these, so its token ids are the same either way).
        words = [w for c in all_convs for t in c for w in t["content"].split()]
        build_kimi_tiny(verifier, spec, words=words)
        return {"path": str(verifier)}

    def build_data() -> dict[str, Any]:
        from datasets import load_from_disk

        # `speculators prepare-data --render-endpoint local`: the verifier's chat
        # template renders each conversation, no vLLM server.
        prepare_data(verifier, write_conversations(convs, jsonl), data)
        seq_lens = load_from_disk(str(data))["seq_len"]
        return {"samples": len(seq_lens), "max_len": int(max(seq_lens))}

    def hidden_states() -> dict[str, Any]:
        res = generate_hidden_states(verifier, data, dtype=s.dtype)
        return {"written": res.written, "target_layer_ids": res.target_layer_ids}

    def train() -> dict[str, Any]:
        run_dir.mkdir(parents=True, exist_ok=True)
        speculators = str(Path(sys.executable).parent / "speculators")
        cmd = [speculators, "train", *train_argv(verifier, data, run_dir, s)]
        text = _stream(cmd, run_dir / "train.log")
        losses = [float(x) for x in _LOSS.findall(text)]
        return {"losses": losses, "command": shlex.join(cmd)}

    train_inputs = {
        "epochs": s.epochs,
        "max_steps": s.max_steps,
        "total_seq_len": s.total_seq_len,
        "lr": s.lr,
        "train_data_ratio": s.train_data_ratio,
        "extra_train_args": list(s.extra_train_args),
    }
    stages = _Stages(
        out,
        [
            _Stage(
                "verifier",
                {"spec": asdict(spec), "dataset": dataset},
                (verifier,),
                build_verifier,
            ),
            _Stage(
                "data",
                {"num_samples": len(convs), "dataset": dataset},
                (jsonl, data),
                build_data,
            ),
            _Stage(
                "hidden-states", {"dtype": s.dtype}, (data / HS_DIRNAME,), hidden_states
            ),
            _Stage("train", train_inputs, (run_dir,), train),
        ],
    )
    results = stages.run_all("train" if s.train else "hidden-states")
    if not s.train:
        return {"out": str(out), "verifier": str(verifier), "data": str(data)}
    info_data, info_hs, info_train = (
        results[k] for k in ("data", "hidden-states", "train")
    )

    from speculators import SpeculatorModel

    ckpt = _last_checkpoint(run_dir / "checkpoints")
    model = SpeculatorModel.from_pretrained(str(ckpt))
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    config = json.loads((ckpt / "config.json").read_text())
    metrics_file = ckpt / "val_metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    losses = info_train.get("losses") or []
    report = {
        "out": str(out),
        "verifier": str(verifier),
        "data": str(data),
        "checkpoint": str(ckpt),
        "samples": info_data.get("samples"),
        "target_layer_ids": info_hs.get("target_layer_ids"),
        "train_steps": len(losses),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "val_loss": metrics.get("loss_epoch"),
        "val_step0_accuracy": metrics.get("full_acc_0_epoch"),
        "draft_class": type(model).__name__,
        "draft_trainable_params": n_params,
        "verifier_architectures": config.get("speculators_config", {})
        .get("verifier", {})
        .get("architectures"),
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    return report


def format_report(r: dict[str, Any]) -> str:
    def num(x: Any) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    return "\n".join(
        [
            "EAGLE-3 demo on a tiny Kimi-K2.5-shaped verifier",
            f"  verifier     {r['verifier']}",
            f"  data         {r['data']} ({r['samples']} samples, aux layers "
            f"{r['target_layer_ids']})",
            f"  draft        {r['checkpoint']} ({r['draft_class']}, "
            f"{r['draft_trainable_params']} trainable parameters; verifier "
            f"{r['verifier_architectures']})",
            f"  train loss   {num(r['loss_first'])} -> {num(r['loss_last'])} over "
            f"{r['train_steps']} steps",
            f"  held-out     loss {num(r['val_loss'])}, step-0 draft accuracy "
            f"{num(r['val_step0_accuracy'])}",
            f"  wall time    {r['seconds']} s (this invocation)",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``demo`` options."""
    d = DemoSettings()
    parser.add_argument("--out", type=Path, default=d.out, help="working directory")
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument(
        "--num-samples", type=int, default=None, help="use the first N conversations"
    )
    parser.add_argument("--fresh", action="store_true", help="ignore finished stages")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the demo from parsed arguments."""
    settings = DemoSettings(
        out=args.out,
        epochs=args.epochs,
        max_steps=args.max_steps,
        num_samples=args.num_samples,
        fresh=args.fresh,
    )
    report = run_demo(settings)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m speculators_kimi.demo ...`` (same as ``speculators-kimi demo``)."""
    from .cli import command_main

    return command_main("demo", argv)


if __name__ == "__main__":
    raise SystemExit(main())
