"""Benchmark: acceptance at long context, a draft trained on long sequences
(``--sp-size 2``) against the same draft trained short.

Upstream's trainer packs rows into ``--total-seq-len`` tokens but masks
attention per row and restarts ``position_ids`` at every row, so what a draft
learns about context is bounded by its rows, not by the packing length: the
demo's rows are one conversation each (57-117 tokens), however long
``--total-seq-len`` is. Training long means long rows, and a long
``--total-seq-len`` to hold them (which ``--sp-size`` splits over ranks).

On the demo's tiny Kimi-K2.5-shaped verifier (``speculators-kimi demo``'s
verifier, replies, prepared data and hidden states, reused through
:func:`~speculators_kimi.demo.run_demo`):

* **short**: ``speculators train`` in one process on the demo's rows,
  ``--total-seq-len 256``, ``--epochs`` (3: the demo's run stopped halfway);
* **long**: ``torchrun --nproc-per-node 2 -m speculators.train --sp-size 2``
  (gloo, CPU) with ``--total-seq-len 1024`` on the same training conversations
  laid end to end into rows of up to 1024 tokens, whole conversations in their
  order, each keeping its own loss mask (what ``evaluate --context-length`` does
  to the held-out ones), with hidden states from our ``generate-hidden-states``
  over those long rows (the verifier sees the earlier conversations). A long
  row is one step, so at equal epochs it takes about a quarter of the short
  run's optimizer steps: it runs until it has taken as many steps as the short
  run, and its checkpoint after ``--epochs`` epochs is measured too
  (``long_equal_epochs``, ``long_equal_steps``).

Held equal: the training conversations and their trained tokens, the
validation conversations, learning rate (constant), seed, the draft vocabulary
(one ``--token-freq-path``, so one ``d2t``), draft architecture, 3 TTT steps,
``sdpa`` attention; and either the epochs (so the tokens seen) or the
optimizer steps, not both (one packed sequence a step, no accumulation).

Each is then measured by ``speculators-kimi evaluate`` (K=3, greedy, 32 new
tokens) on the demo's held-out prompts as they are and with ``--context-length
960`` (the tiny verifier's and the drafts' position limit is 1024), reporting
acceptance length per context bucket. Run with ``OMP_NUM_THREADS=1`` on a
shared machine (two intra-op threads on two busy cores stall each other).

    OMP_NUM_THREADS=1 python benchmarks/long_context_acceptance.py \\
        --json benchmarks/results/DATE-cpu-long_context_acceptance.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_common import cpu_model, process_memory  # this directory (run as a script)

from speculators_kimi.cli_args import save_json_report

BIN = Path(sys.executable).parent
_LOSS = re.compile(r"train/loss=([-+0-9.e]+|nan|inf)")

#: The two drafts: (total_seq_len, sp_size).
DRAFTS = {"short": (256, 1), "long": (1024, 2)}
#: ``evaluate --context-length`` settings (None: the held-out prompts as they are).
CONTEXTS: tuple[int | None, ...] = (None, 960)


def long_rows(data: Path, out: Path, ratio: float, length: int) -> dict[str, Any]:
    """``out``: the rows of the prepared dataset ``data`` laid end to end, whole
    rows in their order, into rows of up to ``length`` tokens; the training
    split's rows and the validation split's never share a row. Returns the
    ``--train-data-ratio`` that splits ``out`` where ``data`` was split."""
    from datasets import Dataset, load_from_disk

    rows = load_from_disk(str(data)).with_format(None)
    split = int(len(rows) * ratio)
    per_token = ("input_ids", "loss_mask")

    def pack(indices: range) -> list[dict[str, Any]]:
        packed: list[dict[str, Any]] = []
        current: dict[str, Any] | None = None
        for i in indices:
            row = rows[i]
            n = len(row["input_ids"])
            if current is None or len(current["input_ids"]) + n > length:
                current = {key: list(row[key]) for key in per_token}
                current["conversations"] = 1
                packed.append(current)
                continue
            for key in per_token:
                current[key] += row[key]
            current["conversations"] += 1
        return packed

    train, val = pack(range(split)), pack(range(split, len(rows)))
    table = {key: [r[key] for r in train + val] for key in per_token}
    table["seq_len"] = [len(ids) for ids in table["input_ids"]]
    extra = [c for c in rows.column_names if c not in table]
    if extra:  # a column we would lay end to end without knowing how
        raise SystemExit(f"{data}: columns {extra} not handled by long_rows")
    # A finished layout keeps its hidden states; another one is rewritten.
    if out.exists() and load_from_disk(str(out)).with_format(None).to_dict() != table:
        shutil.rmtree(out)
    if not out.exists():
        Dataset.from_dict(table).save_to_disk(str(out))
    # int(m * r) == len(train): the trainer's split boundary is ours.
    new_ratio = (len(train) + 0.5) / (len(train) + len(val))
    return {
        "train_conversations": split,
        "val_conversations": len(rows) - split,
        "rows": len(train) + len(val),
        "train_rows": len(train),
        "val_rows": len(val),
        "conversations_per_train_row": [r["conversations"] for r in train],
        "train_data_ratio": new_ratio,
        "max_len": max(table["seq_len"]),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train(
    name: str,
    verifier: Path,
    data: Path,
    work: Path,
    epochs: int,
    common: dict[str, Any],
) -> dict[str, Any]:
    """One draft through ``speculators train`` (``torchrun`` for ``--sp-size``);
    a finished run of the same command under ``work`` is reused."""
    from speculators_kimi.demo import DemoSettings, train_argv
    from speculators_kimi.demo.stream import stream

    seq_len, sp_size = DRAFTS[name]
    run_dir = work / f"run-{name}"
    extra = ["--draft-attn-impl", "sdpa", "--token-freq-path", common["token_freq"]]
    settings = DemoSettings(
        total_seq_len=seq_len,
        epochs=epochs,
        train_data_ratio=common["ratios"][name],
        extra_train_args=[*extra, *(["--sp-size", str(sp_size)] * (sp_size > 1))],
    )
    argv = train_argv(verifier, data, run_dir, settings)
    if sp_size > 1:
        launch = [str(BIN / "torchrun"), "--nproc-per-node", str(sp_size)]
        launch += ["--master-addr", "127.0.0.1", "--master-port", "{port}"]
        cmd = [*launch, "-m", "speculators.train", *argv]
    else:
        cmd = [str(BIN / "speculators"), "train", *argv]
    done = run_dir / "finished.json"
    if done.is_file() and json.loads(done.read_text())["command"] == cmd:
        return dict(json.loads(done.read_text()), reused=True)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    t0, cpu0 = time.perf_counter(), os.times()
    port = str(_free_port())
    text = stream([a.replace("{port}", port) for a in cmd], run_dir / "train.log")
    cpu = os.times()
    losses = [float(x) for x in _LOSS.findall(text)]  # rank 0's lines
    result = {
        "total_seq_len": seq_len,
        "sp_size": sp_size,
        "processes": sp_size,
        "data": str(data),
        "train_data_ratio": settings.train_data_ratio,
        "epochs": epochs,
        "steps": len(losses),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "wall_s": round(time.perf_counter() - t0, 1),
        "children_cpu_s": round(
            cpu.children_user + cpu.children_system - cpu0[2] - cpu0[3], 1
        ),
        "checkpoints": str(run_dir / "checkpoints"),
        "command": cmd,
    }
    done.write_text(json.dumps(result, indent=1))
    return result


def checkpoint(run: dict[str, Any], epoch: int) -> dict[str, Any]:
    """A run's checkpoint after ``epoch`` epochs and its validation metrics."""
    ckpt = Path(run["checkpoints"]) / str(epoch - 1)
    metrics = json.loads((ckpt / "val_metrics.json").read_text())
    steps_per_epoch = run["steps"] / run["epochs"]
    return {
        "checkpoint": str(ckpt),
        "total_seq_len": run["total_seq_len"],
        "sp_size": run["sp_size"],
        "epochs": epoch,
        "steps": round(steps_per_epoch * epoch),
        "val_loss": metrics.get("loss_epoch"),
        "val_step0_accuracy": metrics.get("full_acc_0_epoch"),
    }


def evaluate(
    checkpoint: Path, verifier: Path, data: Path, context: int | None, out: Path
) -> dict[str, Any]:
    """``speculators-kimi evaluate`` (K=3, greedy, 32 new tokens) on the demo's
    held-out prompts, long ones with ``--context-length``."""
    from speculators_kimi.demo.stream import offline_env

    cmd = [str(BIN / "speculators-kimi"), "evaluate", "--draft", str(checkpoint)]
    cmd += ["--verifier", str(verifier), "--data", str(data), "--no-progress"]
    cmd += ["--num-speculative-tokens", "3", "--max-new-tokens", "32"]
    cmd += ["--context-length", str(context)] if context else []
    cmd += ["--json", str(out)]

    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=offline_env(), stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    return {
        "context_length": context,
        "mean_acceptance_length": report["mean_acceptance_length"],
        "acceptance_by_context": report["acceptance_by_context"],
        "num_prompts": report["num_prompts"],
        "lossless": report["lossless"],
        "warnings": report.get("warnings", []),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def same_vocabulary(a: Path, b: Path) -> bool:
    """Both drafts map the same draft vocabulary (``d2t``)."""
    from safetensors.torch import load_file

    def d2t(ckpt: Path) -> torch.Tensor:
        tensors: dict[str, torch.Tensor] = {}
        for f in sorted(ckpt.glob("*.safetensors")):
            tensors.update(load_file(f))
        return tensors["d2t"]

    return bool(torch.equal(d2t(a), d2t(b)))


def table(evals: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (prompts, context bucket): each draft's steps and AL."""
    rows: dict[tuple[Any, int, int], dict[str, Any]] = {}
    for name, runs in evals.items():
        for run in runs:
            for b in run["acceptance_by_context"]:
                key = (run["context_length"], b["context_from"], b["context_to"])
                row = rows.setdefault(
                    key,
                    {
                        "context_length": key[0],
                        "bucket": f"{key[1]}-{key[2]}",
                    },
                )
                row[f"{name}_drafts"] = b["num_drafts"]
                row[f"{name}_al"] = b["mean_acceptance_length"]
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="keep runs here")
    parser.add_argument("--epochs", type=int, default=3, help="the short draft's")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from speculators_kimi.datagen import generate_hidden_states
    from speculators_kimi.demo import DemoSettings, run_demo

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        d = DemoSettings()
        # The demo's verifier, replies, rows and hidden states (reused if there).
        demo = run_demo(DemoSettings(out=work / "demo", train=False))
        verifier, data = Path(demo["verifier"]), Path(demo["data"])
        long_data = work / "long-data"
        long_seq = DRAFTS["long"][0]
        layout = long_rows(data, long_data, d.train_data_ratio, long_seq)
        t0 = time.perf_counter()
        generate_hidden_states(verifier, long_data, dtype=d.dtype, progress=False)
        long_hs_s = round(time.perf_counter() - t0, 1)
        common = {
            "epochs": args.epochs,
            "token_freq": str(data / "token_freq.pt"),
            "ratios": {
                "short": d.train_data_ratio,
                "long": layout["train_data_ratio"],
            },
        }
        sources = {"short": data, "long": long_data}
        runs = {"short": train("short", verifier, data, work, args.epochs, common)}
        # Rows of up to 1024 tokens hold whole conversations: no two share a
        # step, so an epoch is one step per training row. Enough epochs to take
        # the short draft's optimizer steps; the run's checkpoint after
        # --epochs epochs is the long draft at equal epochs.
        long_epochs = max(
            args.epochs, round(runs["short"]["steps"] / layout["train_rows"])
        )
        runs["long"] = train(
            "long", verifier, sources["long"], work, long_epochs, common
        )
        drafts = {
            "short": checkpoint(runs["short"], args.epochs),
            "long_equal_epochs": checkpoint(runs["long"], args.epochs),
            "long_equal_steps": checkpoint(runs["long"], long_epochs),
        }
        evals: dict[str, list[dict[str, Any]]] = {name: [] for name in drafts}
        for context in CONTEXTS:
            for name, draft in drafts.items():
                out = work / f"eval-{name}-{context or 0}.json"
                ckpt = Path(draft["checkpoint"])
                evals[name].append(evaluate(ckpt, verifier, data, context, out))
        result = {
            "benchmark": "long_context_acceptance",
            "date": dt.date.today().isoformat(),
            "device": f"cpu: {cpu_model()}, {os.cpu_count()} cores",
            "held_equal": {
                "train_conversations": layout["train_conversations"],
                "val_conversations": layout["val_conversations"],
                "epochs": args.epochs,
                "lr": d.lr,
                "draft_vocab_size": d.draft_vocab_size,
                "token_freq_path": common["token_freq"],
                "same_d2t": same_vocabulary(
                    Path(drafts["short"]["checkpoint"]),
                    Path(drafts["long_equal_steps"]["checkpoint"]),
                ),
                "draft_arch": d.draft_arch,
                "draft_attn_impl": "sdpa",
                "evaluate": {"num_speculative_tokens": 3, "max_new_tokens": 32},
            },
            "long_rows": {**layout, "hidden_states_s": long_hs_s},
            "train": runs,
            "drafts": drafts,
            "evaluate": evals,
            "table": table(evals),
            "wall_s": round(time.perf_counter() - t_start, 1),
            "memory_after_runs": process_memory(),
        }
    save_json_report(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
