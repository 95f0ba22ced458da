# SPDX-License-Identifier: Apache-2.0
"""``train --sp-size``: Ulysses sequence parallelism for EAGLE-3, exact on CPU.

The exactness cases run ``tests/unit/mock/sp_worker.py`` under torchrun (gloo,
fp64, a tiny Llama draft): once per degree for the whole module.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.nn.attention.flex_attention import create_mask
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import speculators
from speculators.models.eagle3 import sequence_parallel as sp
from speculators.models.eagle3.attention import (
    create_combined_mask_mod,
    extend_dense_mask_for_draft_tokens,
)
from speculators.train.config.resolution import ConfigError
from tests.unit.mock import sp_worker

WORKER = Path(__file__).parents[1] / "mock" / "sp_worker.py"
EXACT = 1e-10


@pytest.fixture(scope="module")
def sp_runs(tmp_path_factory):
    """The worker's report per degree, each degree launched once."""
    reports: dict[int, dict] = {}

    def run(nproc: int) -> dict:
        if nproc not in reports:
            out = tmp_path_factory.mktemp(f"sp{nproc}") / "report.json"
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(speculators.__file__).parents[1])]
                    + [p for p in [os.environ.get("PYTHONPATH")] if p]
                ),
                "OMP_NUM_THREADS": "1",
            }
            proc = subprocess.run(  # noqa: S603
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    f"--nproc-per-node={nproc}",
                    str(WORKER),
                    str(out),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
            reports[nproc] = json.loads(out.read_text())
        return reports[nproc]

    return run


@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("attn_impl", ["eager", "sdpa"])
def test_sp_matches_one_process(sp_runs, nproc, attn_impl):
    report = sp_runs(nproc)
    assert report["world_size"] == nproc
    diffs = report["cases"][attn_impl]
    # The loss and every trainable parameter's gradient (fc, the layer, norms).
    assert "loss" in diffs
    assert any(name.startswith("layers.0.self_attn.q_proj") for name in diffs)
    assert "fc.weight" in diffs
    assert max(diffs.values()) < EXACT, diffs


@pytest.mark.parametrize("nproc", [2, 4])
def test_per_chunk_shift_fails_the_gradient_check(sp_runs, nproc):
    """PR #871's way (shift and loss cut per chunk) is not the one-process step."""
    diffs = sp_runs(nproc)["cases"]["per_chunk_shift"]
    grads = {k: v for k, v in diffs.items() if k != "loss"}
    assert max(grads.values()) > 1e-3, diffs


def test_sp_with_data_parallel_averages_groups(sp_runs):
    """Two SP groups of two on their own batches: the mean of two processes."""
    diffs = sp_runs(4)["cases"]["sp2_dp2"]
    assert max(diffs.values()) < EXACT, diffs


# ---------------------------------------------------------------------------
# In-process pieces
# ---------------------------------------------------------------------------


def _check(sp_size: int, **overrides):
    args: dict[str, Any] = {
        "world_size": 4,
        "total_seq_len": 64,
        "ttt_steps": 3,
        "speculator_type": "eagle3",
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "attn_impl": "eager",
    } | overrides
    sp.check_sp_size(sp_size, **args)


@pytest.mark.parametrize(
    ("sp_size", "overrides", "words"),
    [
        (3, {}, "must divide the world size 4"),
        (2, {"total_seq_len": 63}, "must divide --total-seq-len 63"),
        (4, {"num_key_value_heads": 2}, "key/value heads (2)"),
        (4, {"total_seq_len": 4}, "fewer than --ttt-steps - 1"),
        (2, {"attn_impl": "simple_flex_attention"}, "--draft-attn-impl eager or"),
        (2, {"speculator_type": "dflash"}, "eagle3"),
        (2, {"draft_arch": "deepseek_v3"}, "--draft-arch deepseek_v3"),
        (0, {}, "at least 1"),
    ],
)
def test_check_sp_size_refuses_in_one_line(sp_size, overrides, words):
    with pytest.raises(ConfigError) as info:
        _check(sp_size, **overrides)
    message = str(info.value)
    assert "--sp-size" in message
    assert words in message
    assert "\n" not in message


def test_check_sp_size_accepts():
    _check(1, world_size=3, total_seq_len=7)
    _check(2)
    _check(4)
    # Heads and attention are checked once the draft is built.
    _check(2, num_attention_heads=None, num_key_value_heads=None, attn_impl=None)
    _check(2, draft_arch="llama")


def test_split_batch_chunks_and_halo():
    seq, ttt = 12, 3
    batch = {
        "hidden_states": torch.arange(seq).view(1, seq, 1).float(),
        "verifier_last_hidden_states": torch.arange(seq).view(1, seq, 1).float(),
        "input_ids": torch.arange(seq).view(1, seq),
        "document_ids": torch.zeros(1, seq, dtype=torch.long),
        "loss_mask": torch.ones(1, seq, dtype=torch.bool),
    }
    parts = [sp.split_batch(batch, r, 3, ttt) for r in range(3)]
    assert [p["hidden_states"].flatten().tolist() for p in parts] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]
    assert [p["verifier_last_hidden_states"].flatten().tolist() for p in parts] == [
        [0, 1, 2, 3, 4, 5],
        [4, 5, 6, 7, 8, 9],
        [8, 9, 10, 11],
    ]
    for part in parts:
        for key in ("input_ids", "document_ids", "loss_mask"):
            assert part[key] is batch[key]
    with pytest.raises(ValueError, match="--sp-size 5"):
        sp.split_batch(batch, 0, 5, ttt)


def test_teacher_forcing_and_loss_use_global_positions():
    ids = torch.arange(1, 13).view(1, 12)
    # Step 2 on the middle chunk reads the next chunk's ids ...
    assert sp.step_input_ids(ids, 2, 4, 8).tolist() == [[7, 8, 9, 10]]
    # ... and zeros only past the sequence's end.
    assert sp.step_input_ids(ids, 2, 8, 12).tolist() == [[11, 12, 0, 0]]
    # Every position of an inner chunk is in the loss; the last t drop only at
    # the end of the sequence.
    assert sp.step_loss_positions(12, 2, 4, 8) == 4
    assert sp.step_loss_positions(12, 2, 8, 12) == 2


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("steps", [1, 3])
def test_block_mask_is_upstreams_mask(steps, window):
    doc_ids = torch.tensor([0] * 5 + [1] * 7 + [2] * 3 + [-1] * 3)
    seq = doc_ids.shape[0]
    mask_mod = create_combined_mask_mod(doc_ids, seq, sliding_window=window)
    upstream = create_mask(mask_mod, None, None, seq, seq, device="cpu")
    for _ in range(steps - 1):
        upstream = extend_dense_mask_for_draft_tokens(upstream, seq)
    kv_len = seq * steps
    whole = sp._block_mask(doc_ids, 0, seq, kv_len, window)
    assert torch.equal(whole, upstream[0, 0])
    # Built one block of queries at a time, never the whole square.
    assert torch.equal(
        sp._block_mask(doc_ids, 6, 11, kv_len, window),
        upstream[0, 0, 6:11],
    )


class _LargestAllocation(TorchDispatchMode):
    """The largest storage any operator produces while the mode is on."""

    def __init__(self) -> None:
        super().__init__()
        self.nbytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.nbytes = max(self.nbytes, leaf.untyped_storage().nbytes())
        return out


@pytest.fixture
def one_rank_group():
    """A one-rank gloo group in this process (the SP step's collectives)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def _largest_step_allocation(seq_len: int, group) -> int:
    """The largest tensor of one training step (forward and backward)."""
    gen = torch.Generator().manual_seed(seq_len)
    hidden, vocab = sp_worker.HIDDEN, sp_worker.VOCAB
    data = {
        "hidden_states": torch.randn(1, seq_len, 3 * hidden, generator=gen),
        "input_ids": torch.randint(0, vocab, (1, seq_len), generator=gen),
        "document_ids": (torch.arange(seq_len) // 48).unsqueeze(0),
        "loss_mask": torch.ones(1, seq_len, dtype=torch.bool),
        "verifier_last_hidden_states": torch.randn(1, seq_len, hidden, generator=gen),
    }
    model = sp_worker.tiny_draft("eager")
    kwargs = sp_worker.call_kwargs()
    if group is not None:
        kwargs["sp_group"] = group
    with _LargestAllocation() as largest:
        _, loss, _ = model(**data, **kwargs)
        loss.backward()
    return largest.nbytes


def test_sp_step_memory_is_linear_in_tokens(one_rank_group, monkeypatch):
    """Doubling the tokens at most doubles the SP step's largest tensor (masks
    and attention weights per block of queries, checkpointed); upstream's dense
    eager path, measured the same way, quadruples."""
    monkeypatch.setattr(sp, "QUERY_BLOCK", 16)
    threads = torch.get_num_threads()
    # Tiny tensors: more threads only wait on each other (on a busy machine).
    torch.set_num_threads(1)
    try:
        sp_sizes = [_largest_step_allocation(n, one_rank_group) for n in (64, 128)]
        dense = [_largest_step_allocation(n, None) for n in (64, 128)]
    finally:
        torch.set_num_threads(threads)
    assert sp_sizes[1] <= 2 * sp_sizes[0], sp_sizes
    assert dense[1] >= 3.9 * dense[0], dense
    # Already at 128 tokens the largest SP tensor is a fraction of the dense one.
    assert sp_sizes[1] * 4 < dense[1], (sp_sizes, dense)
