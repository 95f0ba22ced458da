"""The ``triton`` draft attention backend through the whole Eagle3 draft model.

Loss and every parameter gradient of one training step over 3 TTT steps must match
the ``sdpa`` backend (Triton interpreter on CPU; ``tests/kernels/conftest.py`` sets
``TRITON_INTERPRET=1``). Skipped until both the kernels
(``speculators_kimi.kernels.draft_attention``) and the pluggable draft attention
unit (``speculators.models.attention_backends``) are importable.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch
from tiny_drafts import (
    SEQ_LEN,
    WINDOW,
    document_ids,
    tiny_eagle3,
    tiny_mla_eagle3,
    train_step,
)


def _importable(module: str, attr: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


pytestmark = [
    pytest.mark.skipif(
        not _importable("speculators_kimi.kernels", "draft_attention"),
        reason="speculators_kimi.kernels.draft_attention is not there yet",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("speculators.models.attention_backends") is None,
        reason="the vendored speculators lacks the pluggable draft attention unit",
    ),
]

# fp32 throughout; the kernels' online softmax sums in a different order than sdpa.
LOSS_TOL: dict[str, Any] = {"rtol": 1e-5, "atol": 1e-5}
GRAD_TOL: dict[str, Any] = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture
def triton_backend(monkeypatch):
    """The ``triton`` backend, from its entry point or registered for this test."""
    from speculators.models import attention_backends
    from transformers.modeling_utils import AttentionInterface

    from speculators_kimi.kernels.backend import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # Whatever a test registers is undone afterwards.
    registry = attention_backends.DraftAttentionBackend.registry or {}
    monkeypatch.setattr(
        attention_backends.DraftAttentionBackend, "registry", dict(registry)
    )
    monkeypatch.setattr(attention_backends, "_INSTANCES", {})
    monkeypatch.setattr(
        AttentionInterface, "_global_mapping", dict(AttentionInterface._global_mapping)
    )
    try:
        backend = attention_backends.get_backend("triton")
    except ValueError:  # the entry point is not installed
        attention_backends.DraftAttentionBackend.register("triton")(TritonBackend)
        backend = attention_backends.get_backend("triton")
    assert isinstance(backend, TritonBackend)
    return backend


def test_eagle3_train_step_matches_sdpa(triton_backend):
    want = train_step(tiny_eagle3("sdpa"))
    got = train_step(tiny_eagle3("triton"))
    assert got.keys() == want.keys()
    # fc, both layers' attention and MLP weights, norms: every trainable parameter.
    assert len(got) > 20
    torch.testing.assert_close(got.pop("loss"), want.pop("loss"), **LOSS_TOL)
    for name, grad in got.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, want[name], **GRAD_TOL, msg=name)


def test_mask_is_built_once_and_not_extended(triton_backend):
    mask = triton_backend.build_mask(document_ids(), SEQ_LEN, "cpu", WINDOW)
    assert mask.sliding_window == WINDOW
    assert mask.document_ids.dtype == torch.int32
    assert triton_backend.extend_mask(mask, SEQ_LEN) is mask
    with pytest.raises(ValueError, match="document_ids must be"):
        triton_backend.build_mask(document_ids(), SEQ_LEN + 1, "cpu")


def test_supports_device(triton_backend, monkeypatch):
    from speculators.train.device import cpu_attn_impls

    assert triton_backend.supports_device("cuda")
    assert triton_backend.supports_device(torch.device("cuda", 1))
    assert triton_backend.supports_device("cpu")
    assert "triton" in cpu_attn_impls()
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not triton_backend.supports_device("cpu")
    assert "triton" not in cpu_attn_impls()
    assert not triton_backend.supports_device("meta")


def test_cpu_says_how_it_could_run_and_that_it_is_slow(triton_backend, monkeypatch):
    """Without the interpreter, CPU training's refusal names TRITON_INTERPRET=1;
    with it, the first mask build says the run is the slow interpreter's."""
    from speculators.train.config import TrainConfig
    from speculators.train.config.resolution import ConfigError
    from speculators.train.device import device_fallbacks

    from speculators_kimi.kernels.backend import InterpretedKernelsWarning

    monkeypatch.delenv("TRITON_INTERPRET")
    cfg = TrainConfig.from_flat({"draft_attn_impl": "triton"})
    with pytest.raises(ConfigError, match="--draft-attn-impl triton") as err:
        device_fallbacks(cfg, torch.device("cpu"))
    assert "(or set TRITON_INTERPRET=1 to run the kernels in" in str(err.value)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "draft_attn_impl" not in device_fallbacks(cfg, torch.device("cpu"))
    with pytest.warns(InterpretedKernelsWarning, match="far slower than sdpa"):
        triton_backend.build_mask(document_ids(), SEQ_LEN, "cpu")


def test_custom_mask_mods_are_refused(triton_backend):
    # e.g. P-EAGLE's masks: the kernels implement only the Eagle3 TTT mask.
    with pytest.raises(NotImplementedError, match="'triton'"):
        triton_backend.mask_from_mod(lambda b, h, q, kv: q >= kv, 4, 4, "cpu")


@pytest.mark.parametrize("speculator_type", ["dflash", "peagle"])
def test_speculators_train_refuses_other_drafts_before_any_work(
    triton_backend, tmp_path, monkeypatch, capsys, speculator_type
):
    """The block drafters and P-EAGLE build masks the kernels cannot read: they
    failed at the first forward (a TypeError, or P-EAGLE's NotImplementedError)
    after the verifier's weights had loaded; now one line (unit 0025's check)."""
    from datasets import Dataset
    from helpers import console_in_process

    from speculators_kimi.tiny_verifier import TinyVerifierSpec, llama

    verifier = llama(TinyVerifierSpec(), tmp_path / "verifier").path
    data, save = tmp_path / "data", tmp_path / "run"
    rows = {"input_ids": [[1, 2, 3]], "loss_mask": [[0, 1, 1]], "seq_len": [3]}
    Dataset.from_dict(rows).save_to_disk(str(data))
    argv = ["speculators", "train", "--verifier-name-or-path", str(verifier)]
    argv += ["--data-path", str(data), "--save-path", str(save)]
    argv += ["--speculator-type", speculator_type, "--draft-attn-impl", "triton"]
    code, err = console_in_process(argv, monkeypatch, capsys)
    assert code == 1, err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: ConfigError: --draft-attn-impl triton cannot train "
        f"--speculator-type {speculator_type}: its backend builds only EAGLE-3's "
        "masks, and this draft's masks come from mask_mod functions (a backend's "
        "mask_from_mod); use one of --draft-attn-impl simple_flex_attention, sdpa, "
        "eager, or train --speculator-type eagle3."
    ], err[-3000:]
    assert not save.exists()


def test_mla_draft_train_step_matches_sdpa(triton_backend):
    """Loss and every gradient of an MLA draft over 3 TTT steps, ``triton`` vs
    ``sdpa``: the kernels take q/k heads wider than v heads and the layer's
    YaRN-scaled softmax scale."""
    want = train_step(tiny_mla_eagle3("sdpa"))
    got = train_step(tiny_mla_eagle3("triton"))
    attention = tiny_mla_eagle3("sdpa").layers[0].self_attn
    assert attention.qk_head_dim == 24 and attention.v_head_dim == 16
    assert attention.scaling != pytest.approx(24**-0.5)  # mscale applied
    assert got.keys() == want.keys()
    assert any("kv_b_proj" in name for name in got)
    torch.testing.assert_close(got.pop("loss"), want.pop("loss"), **LOSS_TOL)
    for name, grad in got.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, want[name], **GRAD_TOL, msg=name)


def test_heads_wider_than_the_kernels_are_refused_with_the_fix():
    """The one shape the kernels cannot hold: a head wider than 256."""
    from speculators_kimi.kernels.backend import TritonBackend, triton_attention_forward

    n = 8
    mask = TritonBackend().build_mask(torch.zeros(n, dtype=torch.long), n, "cpu")
    q = torch.randn(1, 2, n, 320)
    v = torch.randn(1, 2, n, 128)
    with pytest.raises(ValueError, match="--draft-attn-impl sdpa") as err:
        triton_attention_forward(torch.nn.Module(), q, q, v, mask)
    assert "q/k heads are 320 wide" in str(err.value)


def test_speculators_train_trains_an_mla_draft_with_triton(trained_mla_demo):
    """`speculators train --draft-arch deepseek_v3 --draft-attn-impl triton`, the
    real command (the MLA demo's training run, on the tiny Kimi-K2.5 verifier)."""
    from pathlib import Path

    run = Path(trained_mla_demo["out"]) / "run"
    log = (run / "train.log").read_text()
    assert "draft/draft_attn_impl='triton'" in log
    assert "draft/draft_arch='deepseek_v3'" in log
    assert trained_mla_demo["train_steps"] == 4
    first, last = trained_mla_demo["loss_first"], trained_mla_demo["loss_last"]
    assert torch.isfinite(torch.tensor([first, last])).all()
    assert last < first


def test_sequence_parallel_runs_the_kernels_on_each_ranks_heads(tmp_path):
    """``--sp-size 2`` with ``--draft-attn-impl triton`` (torchrun, gloo, the
    interpreter): each rank runs the kernels on half the heads over the whole
    sequence, and the step is one process's (loss and every gradient, fp32)."""
    import json
    import os

    from helpers import SUPPORT, run, torchrun

    out = tmp_path / "report.json"
    pythonpath = [str(SUPPORT), os.environ.get("PYTHONPATH", "")]
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, pythonpath)),
        "TRITON_INTERPRET": "1",
        "OMP_NUM_THREADS": "1",
    }
    run(torchrun([str(SUPPORT / "sp_kernel_probe.py"), str(out)]), env=env)
    report = json.loads(out.read_text())
    diffs = report["diffs"]
    assert "loss" in diffs
    assert any(name.startswith("layers.1.self_attn.q_proj") for name in diffs)
    # fp32 kernels: the ranks' sums round differently, by far less than LOSS_TOL.
    assert max(diffs.values()) < LOSS_TOL["atol"], diffs
    assert report["scale"] > 1.0
