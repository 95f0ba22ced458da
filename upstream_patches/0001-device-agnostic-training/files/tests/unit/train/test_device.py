"""Tests for device selection and the device fallbacks applied at train start."""

import socket

import pytest
import torch
import torch.distributed as dist

from speculators.train import distributed
from speculators.train.config import TrainConfig
from speculators.train.config.resolution import ConfigError
from speculators.train.device import (
    CPU_LOSS_IMPLS,
    cpu_attn_impls,
    device_fallbacks,
    get_distributed_backend,
    get_training_device,
    has_accelerator,
    memory_allocated_mb,
    set_training_device,
    synchronize,
    triton_interpreter_enabled,
)
from speculators.train.recovery import BatchRecoveryCoordinator
from speculators.train.trainer import _StepTimer
from speculators.utils.util import get_current_device

cpu_only = pytest.mark.skipif(
    torch.accelerator.is_available(), reason="exercises the CPU fallback"
)
accelerator_only = pytest.mark.skipif(
    not torch.accelerator.is_available(), reason="requires an accelerator"
)

REQUIRED_ARGS = ["--verifier-name-or-path", "verifier", "--data-path", "data"]


def _resolve(*args: str) -> TrainConfig:
    return TrainConfig.resolve([*REQUIRED_ARGS, *args])


@pytest.fixture(autouse=True)
def _no_triton_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


# ---------------------------------------------------------------------------
# Device selection
# ---------------------------------------------------------------------------


@cpu_only
def test_training_device_is_cpu_without_accelerator():
    assert not has_accelerator()
    assert get_training_device() == torch.device("cpu")
    assert get_training_device(local_rank=1) == torch.device("cpu")
    assert set_training_device(0) == torch.device("cpu")
    assert get_current_device() == "cpu"


@accelerator_only
def test_training_device_is_local_rank_accelerator(monkeypatch):
    acc = torch.accelerator.current_accelerator()
    assert acc is not None
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert get_training_device() == torch.device(acc.type, 0)
    assert set_training_device(0) == torch.device(acc.type, 0)
    assert get_current_device() == f"{acc.type}:0"


def test_distributed_backend_per_device():
    assert get_distributed_backend(torch.device("cpu")) == "gloo"
    assert get_distributed_backend(torch.device("cuda", 0)) == "nccl"


@cpu_only
def test_sync_and_memory_stats_are_noops_on_cpu():
    synchronize()
    assert memory_allocated_mb() is None


@cpu_only
def test_step_timer_profiles_on_cpu():
    timer = _StepTimer(enabled=True)
    timer.mark_value("start", timer.now() or 0.0)
    for name in ("queue", "pre_h2d", "fetch", "fwd", "pre_clip", "bwd", "opt"):
        timer.mark(name)
    profile = timer.profile(num_tokens=16)
    assert profile is not None
    assert profile["step_ms"] >= 0
    assert "memory_mb" not in profile


def test_recovery_default_device_matches_training_device():
    assert BatchRecoveryCoordinator._default_device() == get_training_device()


# ---------------------------------------------------------------------------
# Device fallbacks (applied at train start, never in config resolution)
# ---------------------------------------------------------------------------

CPU = torch.device("cpu")


def test_resolution_does_not_depend_on_the_device():
    cfg = _resolve()
    assert cfg.draft.draft_attn_impl == "simple_flex_attention"
    assert cfg.loss.loss_implementation == "fused"
    cfg = _resolve("--draft-attn-impl", "simple_flex_attention")
    assert cfg.draft.draft_attn_impl == "simple_flex_attention"


def test_cpu_substitutes_unset_accelerator_only_choices(caplog):
    with caplog.at_level("WARNING", logger="speculators"):
        substitutes = device_fallbacks(_resolve(), CPU)
    assert substitutes == {"draft_attn_impl": "sdpa", "loss_implementation": "eager"}
    assert "training with draft_attn_impl=sdpa instead of simple_flex_attention" in (
        caplog.text
    )


def test_accelerator_substitutes_nothing():
    cfg = _resolve("--draft-attn-impl", "simple_flex_attention")
    assert device_fallbacks(cfg, torch.device("cuda", 0)) == {}


@cpu_only
def test_cpu_attention_backends_include_the_builtins():
    names = cpu_attn_impls()
    assert {"sdpa", "eager"} <= set(names)
    assert "simple_flex_attention" not in names


# The built-in backends that train on CPU; the registry may hold more (plugins,
# or backends that depend on the environment), which this test must not assume.
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("loss", CPU_LOSS_IMPLS)
def test_cpu_keeps_explicit_supported_choices(attn, loss):
    cfg = _resolve("--draft-attn-impl", attn, "--loss-implementation", loss)
    assert device_fallbacks(cfg, CPU) == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--draft-attn-impl", "simple_flex_attention"],
            "--draft-attn-impl simple_flex_attention cannot train on CPU",
        ),
        (["--loss-implementation", "fused"], "--loss-implementation fused"),
    ],
    ids=["flex-attention", "fused-loss"],
)
def test_cpu_rejects_explicit_accelerator_only_choices(args, message):
    cfg = _resolve(*args)
    with pytest.raises(ConfigError, match=message) as exc_info:
        device_fallbacks(cfg, CPU)
    assert "sdpa" in str(exc_info.value) or "eager" in str(exc_info.value)


def test_cpu_rejects_accelerator_only_choice_from_yaml(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("train:\n  draft:\n    draft_attn_impl: simple_flex_attention\n")
    with pytest.raises(ConfigError, match="use one of: .*sdpa"):
        device_fallbacks(_resolve("--config", str(config)), CPU)


def test_cpu_allows_fused_loss_under_triton_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = _resolve("--loss-implementation", "fused")
    assert "loss_implementation" not in device_fallbacks(cfg, CPU)
    # Never picked by default: the interpreter is slow.
    assert device_fallbacks(_resolve(), CPU)["loss_implementation"] == "eager"


@pytest.mark.parametrize(
    ("value", "enabled"), [("1", True), ("true", True), ("On", True), ("0", False)]
)
def test_triton_interpreter_is_read_as_triton_reads_it(monkeypatch, value, enabled):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert triton_interpreter_enabled() is enabled


def test_cpu_leaves_mtp_attention_alone():
    substitutes = device_fallbacks(_resolve("--speculator-type", "mtp"), CPU)
    assert substitutes == {"loss_implementation": "eager"}


def test_cpu_fallbacks_for_config_built_without_provenance():
    cfg = TrainConfig.from_flat({"loss_implementation": "eager"})
    assert device_fallbacks(cfg, CPU) == {"draft_attn_impl": "sdpa"}

    explicit = TrainConfig.from_flat({"draft_attn_impl": "simple_flex_attention"})
    with pytest.raises(ConfigError, match="cannot train on CPU"):
        device_fallbacks(explicit, CPU)


# ---------------------------------------------------------------------------
# Distributed setup
# ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@cpu_only
def test_distributed_setup_uses_gloo_on_cpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    distributed.maybe_setup_distributed()
    try:
        assert distributed.is_distributed()
        assert dist.get_backend() == "gloo"
        assert distributed.get_dp_size() == 1
        tensor = torch.ones(2)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [1.0, 1.0]
    finally:
        distributed.maybe_destroy_distributed()
    assert not dist.is_initialized()
