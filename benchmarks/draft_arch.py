"""Benchmark: Llama-style vs MLA (``--draft-arch deepseek_v3``) EAGLE-3 drafts.

On the demo's tiny Kimi-K2.5-shaped verifier, same data, same steps, same seed:

* **quality**: the demo (``speculators-kimi demo``) trains a ``llama`` draft; its
  directory is copied and the demo rerun with ``--draft-arch deepseek_v3``, so the
  verifier, the regenerated replies, the prepared data and the hidden states are
  the same files, and only training and evaluation run again. Reported per arch:
  trainable parameters, training steps and wall time, held-out step-0 accuracy,
  and acceptance length from ``speculators-kimi evaluate`` at K=3 (greedy, the
  same draft untrained, and T=1), lossless against the verifier's own decoding.
* **step time**: in one process, both drafts built as training builds them
  (``sdpa``), alternating, ``--repeats`` timed training steps each (forward with
  3 TTT steps, loss, backward, AdamW) on the same packed batch; median per arch
  and the ratio deepseek_v3 / llama.
* **Kimi-K2.5 size** (no weights: counted on the meta device): trainable
  parameters and ``speculators-kimi doctor``'s memory estimate for each arch.

Writes JSON with the CPU named and ``RssAnon`` after the runs.

    python benchmarks/draft_arch.py --json benchmarks/results/DATE-cpu-draft_arch.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from bench_common import cpu_model, process_memory  # this directory (run as a script)

from speculators_kimi.cli_args import save_json_report
from speculators_kimi.tiny_verifier.configs import KIMI_K25_TEXT

ARCHS = ("llama", "deepseek_v3")


def draft_config(verifier: Path, arch: str) -> Any:
    """The draft decoder config training builds for ``arch``."""
    from speculators.train.cli import create_transformer_layer_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_transformer_layer_config(
            verifier_name_or_path=str(verifier),
            num_layers=1,
            draft_arch=arch,
            hidden_act=None,
            sliding_window=2048,
            full_attention_indices=[],
        )


def build_draft(verifier: Path, arch: str, draft_vocab: int) -> Any:
    """A one-layer draft of ``arch`` as ``speculators train`` builds it (sdpa)."""
    from speculators.models.eagle3 import Eagle3DraftModel

    torch.manual_seed(0)
    vocab = int(draft_config(verifier, arch).vocab_size)
    ids = torch.arange(0, vocab, vocab // draft_vocab)[:draft_vocab]
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Eagle3DraftModel.from_training_args(
            verifier_config=draft_config(verifier, arch),
            t2d=t2d,
            d2t=ids - torch.arange(draft_vocab),
            verifier_name_or_path=str(verifier),
            draft_vocab_size=draft_vocab,
            norm_before_residual=False,
            ttt_steps=3,
            draft_attn_impl="sdpa",
        )


def step_times(
    verifier: Path, draft_vocab: int, seq_len: int, repeats: int
) -> dict[str, Any]:
    """Median training step per arch, alternating in this process."""
    from speculators.losses import resolve_loss_config

    models = {arch: build_draft(verifier, arch, draft_vocab) for arch in ARCHS}
    hidden = models["llama"].hidden_size
    gen = torch.Generator().manual_seed(0)
    docs = torch.cat([torch.full((seq_len // 4,), i) for i in range(4)])
    batch = {
        "hidden_states": torch.randn(1, seq_len, 3 * hidden, generator=gen),
        "input_ids": torch.randint(0, 512, (1, seq_len), generator=gen),
        "document_ids": docs[None],
        "position_ids": torch.cat([torch.arange(1, seq_len // 4 + 1)] * 4)[None],
        "loss_mask": torch.ones(1, seq_len, dtype=torch.bool),
        "verifier_last_hidden_states": torch.randn(1, seq_len, hidden, generator=gen),
    }
    loss_config = resolve_loss_config("kl_div", "eager")
    optimizers = {
        arch: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad])
        for arch, m in models.items()
    }
    times: dict[str, list[float]] = {arch: [] for arch in ARCHS}
    for i in range(repeats + 2):  # two warm-up rounds
        for arch in ARCHS if i % 2 == 0 else reversed(ARCHS):
            t0 = time.perf_counter()
            _, loss, _ = models[arch](
                **batch, ttt_steps=3, ttt_step_loss_decay=1.0, loss_config=loss_config
            )
            loss.backward()
            optimizers[arch].step()
            optimizers[arch].zero_grad(set_to_none=True)
            if i >= 2:
                times[arch].append(time.perf_counter() - t0)
    median = {arch: statistics.median(t) for arch, t in times.items()}
    return {
        "seq_len": seq_len,
        "ttt_steps": 3,
        "repeats": repeats,
        "median_s": median,
        "ratio_deepseek_v3_over_llama": median["deepseek_v3"] / median["llama"],
    }


def kimi_size(tmp: Path) -> dict[str, Any]:
    """Trainable parameters and doctor's memory estimate at Kimi-K2.5 size."""
    from transformers import DeepseekV3Config

    from speculators_kimi.doctor import DraftChoices, draft_options, estimate_memory

    verifier = tmp / "kimi-k2.5-text"
    DeepseekV3Config(**KIMI_K25_TEXT).save_pretrained(verifier)
    out = {}
    for arch in ARCHS:
        config = draft_config(verifier, arch)
        options = draft_options(str(verifier), DraftChoices(arch=arch))
        memory = estimate_memory(config, draft_vocab=32000, options=options)
        out[arch] = {
            "trainable_params": memory["trainable_params"],
            "frozen_params": memory["frozen_params"],
            "estimated_total_gib": memory["total_gib"],
        }
    return out


def quality(demo: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate each arch on the same demo files."""
    from speculators_kimi.demo import DemoSettings, run_demo

    out = {}
    for arch in ARCHS:
        work = demo.parent / f"{demo.name}-{arch}"
        if not work.exists():
            shutil.copytree(demo, work, symlinks=True)
        t0 = time.perf_counter()
        report = run_demo(DemoSettings(out=work, draft_arch=arch, **settings))
        al = report["acceptance"]
        out[arch] = {
            "draft_arch": report["draft_arch"],
            "trainable_params": report["draft_trainable_params"],
            "train_steps": report["train_steps"],
            "train_and_evaluate_wall_s": round(time.perf_counter() - t0, 1),
            "loss_last": report["loss_last"],
            "val_loss": report["val_loss"],
            "val_step0_accuracy": report["val_step0_accuracy"],
            "al_greedy": al["trained"]["mean_acceptance_length"],
            "al_untrained": al["untrained"]["mean_acceptance_length"],
            "al_t1": al["trained_t1"]["mean_acceptance_length"],
            "acceptance_rate_per_position": al["trained"][
                "acceptance_rate_per_position"
            ],
            "lossless": al["trained"]["lossless"],
            "num_prompts": al["trained"]["num_prompts"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="keep runs here")
    parser.add_argument("--epochs", type=int, default=6, help="the demo's default")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from speculators_kimi.demo import DemoSettings, run_demo

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        base = work / "demo"
        settings = {"epochs": args.epochs}
        # Verifier, replies, data and hidden states once; both archs copy them.
        run_demo(DemoSettings(out=base, train=False, **settings))
        d = DemoSettings()
        result = {
            "benchmark": "draft_arch",
            "date": dt.date.today().isoformat(),
            "device": f"cpu: {cpu_model()}, {torch.get_num_threads()} threads",
            "demo": {
                "epochs": args.epochs,
                "lr": d.lr,
                "total_seq_len": d.total_seq_len,
                "draft_vocab_size": d.draft_vocab_size,
                "eval_speculative_tokens": d.eval_speculative_tokens,
                "eval_new_tokens": d.eval_new_tokens,
            },
            "quality": quality(base, settings),
            "step_time": step_times(
                base / "verifier", d.draft_vocab_size, d.total_seq_len, args.repeats
            ),
            "kimi_k25_size": kimi_size(Path(tmp)),
            "memory_after_runs": process_memory(),
        }
    save_json_report(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
