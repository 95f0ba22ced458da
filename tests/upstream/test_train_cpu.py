"""The unchanged upstream training commands on CPU: one process and torchrun (gloo)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import (
    BIN,
    SUPPORT,
    console_in_process,
    free_port,
    run,
    torchrun_train,
)
from safetensors.torch import load_file
from speculators.models import Eagle3DraftModel

from speculators_kimi.datagen.fixture import build_dataset
from speculators_kimi.tiny_verifier import (
    TinyVerifierSpec,
    build_verifier,
    train_command,
)

STEPS = 3
#: Rich's log lines unwrapped, so a warning can be matched whole.
WIDE = {"COLUMNS": "1000"}
_LOSS = re.compile(r"train/loss=([-+0-9.e]+|nan|inf)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[TinyVerifierSpec, Path, Path]:
    """A tiny Llama verifier and its offline dataset (prepare-data + hidden states)."""
    out = tmp_path_factory.mktemp("tiny")
    spec = TinyVerifierSpec()
    verifier = build_verifier(spec, out / "verifier")
    data = build_dataset(spec, verifier, out / "data")
    return spec, verifier, data


def check_run(out: str, save: Path) -> list[float]:
    """Assert a finished 3-step run: finite losses and a reloadable checkpoint."""
    losses = [float(x) for x in _LOSS.findall(out)]
    assert len(losses) >= STEPS, f"expected {STEPS} logged steps:\n{out[-3000:]}"
    assert all(math.isfinite(x) for x in losses), losses
    ckpt = save / "checkpoints" / "0"
    state = json.loads((ckpt / "training_state.json").read_text())
    assert state["global_step"] == STEPS
    saved = load_file(ckpt / "model.safetensors")
    model = Eagle3DraftModel.from_pretrained(ckpt)
    params = model.state_dict()
    assert saved, "empty checkpoint"
    for key, tensor in saved.items():
        assert torch.equal(params[key].to(tensor.dtype), tensor), key
        assert torch.isfinite(tensor.float()).all(), key
    return losses


def test_speculators_train_on_cpu(tiny, tmp_path, monkeypatch, capsys):
    spec, verifier, data = tiny
    argv = train_command(spec, verifier, data, tmp_path / "run", max_steps=STEPS)
    argv[argv.index("--epochs") + 1] = "2"  # --max-steps ends the run in epoch 1
    proc = run([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    # CPU substitutes are applied at train start; run.yaml keeps upstream's choice.
    assert "draft_attn_impl=sdpa" in out  # the log line (rich may wrap it)
    run_yaml = (tmp_path / "run" / "checkpoints" / "run.yaml").read_text()
    assert "sdpa" not in run_yaml and "eager" not in run_yaml
    assert len(check_run(out, tmp_path / "run")) == STEPS
    # Unit 0028: stopped in its first epoch, recorded as such (a resume with a
    # larger --max-steps goes on from there); no step of the second epoch.
    save = tmp_path / "run" / "checkpoints"
    state = json.loads((save / "0" / "training_state.json").read_text())
    assert state["local_step"] == STEPS, state
    assert not (save / "1").exists()
    # A resume that packs that epoch otherwise would skip batches it never trained
    # on (some rows twice, others never): one line, nothing written.
    record = (save / "run.yaml").read_bytes()
    other = _resumable(argv, 2)
    other[other.index("--total-seq-len") + 1] = "64"
    code, err = console_in_process(other, monkeypatch, capsys)
    assert code == 1, err[-3000:]
    assert "Traceback" not in err
    assert f"ConfigError: {save / '0'} was saved at step {STEPS}" in err
    assert (save / "run.yaml").read_bytes() == record


def _resumable(argv: list[str], epochs: int) -> list[str]:
    argv = [a for a in argv if a != "--no-resume-from-checkpoint"]
    argv[argv.index("--epochs") + 1] = str(epochs)
    argv[argv.index("--max-steps") + 1] = "1000"
    return argv


@pytest.mark.slow
def test_resume_after_sigkill_during_a_save(tiny, tmp_path):
    """SIGKILL while checkpoint 1 is being written: the rerun resumes from 0."""
    spec, verifier, data = tiny
    save = tmp_path / "run" / "checkpoints"
    base = train_command(spec, verifier, data, tmp_path / "run")
    cmd = [str(BIN / base[0]), *base[1:]]
    run(_resumable(cmd, epochs=1), cwd=tmp_path, timeout=600)
    first = (save / "0" / "model.safetensors").read_bytes()

    staging = save / ".1.partial"
    for _attempt in range(5):
        proc = subprocess.Popen(
            _resumable(cmd, epochs=2),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and not staging.exists():
            time.sleep(0.001)  # a save (fsyncs included) lasts longer than this
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            break
        shutil.rmtree(save / "1")  # finished before the kill: try again
    else:
        pytest.fail("never caught a save in progress")
    assert not (save / "1").exists()

    rerun = run(_resumable(cmd, epochs=2), cwd=tmp_path, env=WIDE, timeout=600)
    out = rerun.stdout + rerun.stderr
    assert f"Checkpoint {staging} is incomplete" in out
    assert (save / "1.incomplete").is_dir()
    assert "Resuming training on epoch 2" in out
    assert (save / "0" / "model.safetensors").read_bytes() == first
    assert load_file(save / "1" / "model.safetensors")
    assert (save / "epoch1_end").resolve() == (save / "1").resolve()


def test_resume_skips_a_torn_weights_file(tiny, tmp_path):
    spec, verifier, data = tiny
    save = tmp_path / "run" / "checkpoints"
    base = train_command(spec, verifier, data, tmp_path / "run")
    cmd = _resumable([str(BIN / base[0]), *base[1:]], epochs=1)
    run(cmd, cwd=tmp_path, timeout=600)
    weights = save / "0" / "model.safetensors"
    torn = weights.read_bytes()[: weights.stat().st_size // 2]
    weights.write_bytes(torn)

    rerun = run(cmd, cwd=tmp_path, env=WIDE, timeout=600)
    out = rerun.stdout + rerun.stderr
    assert "model.safetensors is truncated" in out
    assert (save / "0.incomplete" / "model.safetensors").read_bytes() == torn
    assert load_file(save / "0" / "model.safetensors")


_LRS = re.compile(r"lr/AdamW=([-+0-9.e]+)")


def test_resume_continues_only_its_own_run(tiny, tmp_path):
    """Unit 0028: a resume with another draft is one line that leaves the run's
    record as it was; one with more epochs starts at the new schedule's rate."""
    spec, verifier, data = tiny
    save = tmp_path / "run" / "checkpoints"
    base = train_command(spec, verifier, data, tmp_path / "run")
    at = base.index("--max-steps")  # the schedule spans the epochs
    cmd = [str(BIN / base[0]), *base[1:at], *base[at + 2 :], "--log-freq", "1"]
    cmd.remove("--no-resume-from-checkpoint")
    first = run(cmd, cwd=tmp_path, env=WIDE, timeout=600)
    record = {n: (save / n).read_bytes() for n in ("run.yaml", "train_command.txt")}
    peak = float(_LRS.findall(first.stdout + first.stderr)[0])

    other = run([*cmd, "--num-layers", "2"], cwd=tmp_path, env=WIDE, check=False)
    assert other.returncode == 1, other.stderr[-3000:]
    assert "Traceback" not in other.stderr
    assert f"error: ConfigError: {save / '0'} holds another draft" in other.stderr
    assert "this run trains layers.1." in other.stderr
    assert {n: (save / n).read_bytes() for n in record} == record

    longer = [*cmd, "--epochs", "2"]
    resumed = run(longer, cwd=tmp_path, env=WIDE, timeout=600)
    lrs = [float(x) for x in _LRS.findall(resumed.stdout + resumed.stderr)]
    # A linear decay over two epochs is at half its peak after the first, not
    # at the one-epoch run's last rate (0).
    assert lrs[0] == pytest.approx(peak / 2, rel=1e-3), (peak, lrs)
    assert lrs[1] < lrs[0]
    assert (save / "run.yaml").read_bytes() != record["run.yaml"]

    # From scratch over it: the two-epoch run is moved aside whole, so a later
    # plain rerun cannot resume it (it would have resumed its epoch 1).
    run([*cmd, "--no-resume-from-checkpoint"], cwd=tmp_path, timeout=600)
    aside = save / "replaced-run-1"
    assert {"0", "1", "run.yaml", "checkpoint_best"} <= {
        p.name for p in aside.iterdir()
    }
    assert sorted(p.name for p in save.iterdir() if p.name.isdigit()) == ["0"]


def test_save_best_keeps_the_record_and_resumes_on(tiny, tmp_path):
    """Unit 0028: --save-best deleted run.yaml and saved no training state, so
    a resume restarted the step count (and skipped the topology check); it
    skipped --checkpoint-freq's saves without a word."""
    spec, verifier, data = tiny
    save = tmp_path / "run" / "checkpoints"
    base = train_command(spec, verifier, data, tmp_path / "run")
    at = base.index("--max-steps")
    cmd = [str(BIN / base[0]), *base[1:at], *base[at + 2 :], "--save-best"]
    cmd.remove("--no-resume-from-checkpoint")
    first = run([*cmd, "--checkpoint-freq", "0.5"], cwd=tmp_path, env=WIDE, timeout=600)
    # It saves at the ends of epochs only, which it says of --checkpoint-freq.
    assert "--save-best keeps one checkpoint" in first.stdout + first.stderr
    assert "--checkpoint-freq 0.5 saves no other" in first.stdout + first.stderr
    assert (save / "run.yaml").is_file()
    state = json.loads((save / "checkpoint_best" / "training_state.json").read_text())
    assert state["local_step"] == 0 and state["global_step"] > 0, state
    again = run([*cmd, "--epochs", "2"], cwd=tmp_path, env=WIDE, timeout=600)
    out = again.stdout + again.stderr
    assert "Resuming training on epoch 2." in out
    assert "training_topology.json is missing" not in out


def _torchrun_probed(
    tiny, tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[str, list[dict]]:
    """A 3-step torchrun (2 gloo ranks) with what each rank set up (see
    ``distributed_probe``, whose hooks ``env`` may set): its output and the ranks'
    reports."""
    spec, verifier, data = tiny
    argv = train_command(spec, verifier, data, tmp_path / "run", max_steps=STEPS)
    probe = tmp_path / "probe"
    proc = run(
        torchrun_train([*argv[2:], *extra], probe=True),
        cwd=tmp_path,
        env={"SPECULATORS_KIMI_PROBE": str(probe), **(env or {})},
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert out.count("Destroyed distributed process group") == 2, out[-3000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        assert rank["backend"] == "gloo", rank["backend"]
        assert rank["world_size"] == 2
    return out, ranks


@pytest.mark.slow
def test_torchrun_two_processes_gloo(tiny, tmp_path):
    """DDP on two gloo ranks trains; its checkpoint (data-parallel size 2) is
    refused on one process, in one line (unit 0027), before any step."""
    out, ranks = _torchrun_probed(tiny, tmp_path)
    for rank in ranks:
        assert rank["model_class"] == "DistributedDataParallel"
        assert all(p["type"] == "Parameter" for p in rank["params"].values())
    check_run(out, tmp_path / "run")

    spec, verifier, data = tiny
    base = train_command(spec, verifier, data, tmp_path / "run", max_steps=STEPS)
    ckpt = tmp_path / "run" / "checkpoints" / "0"
    before = _sha256(ckpt)
    cmd = _resumable([str(BIN / base[0]), *base[1:]], epochs=2)
    proc = run(cmd, cwd=tmp_path, check=False)
    assert proc.returncode == 1
    errors = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if "ConfigError" in line
    ]
    assert errors == [
        f"error: ConfigError: {ckpt}/training_topology.json was saved at "
        "data-parallel size 2 (2 processes / --sp-size 1) and this run's is 1 "
        "(1 / 1): its batches and schedule depend on it; launch 2 processes at "
        "--sp-size 1 (2 x --sp-size), or start a new run from its weights with "
        f"--from-pretrained {ckpt} and another --save-path."
    ], (proc.stdout + proc.stderr)[-3000:]
    assert _sha256(ckpt) == before

    # From scratch over it (unit 0028 moves the run aside), rank 1 reading the
    # save path after rank 0 moved the run: it took the fresh-run branch and the
    # ranks hung in different collectives.
    _torchrun_probed(tiny, tmp_path, env={"SPECULATORS_KIMI_SLOW_SCAN": "1:5"})
    assert _sha256(tmp_path / "run" / "checkpoints" / "replaced-run-1" / "0") == before
    assert not (ckpt.parent / "1").exists()


@pytest.mark.slow
def test_torchrun_fsdp_shards_the_draft(tiny, tmp_path):
    """``--fsdp-shard``: every trainable parameter is a DTensor sharded on dim 0,
    each rank holds its part (together: the whole), and the saved checkpoint is
    the full model."""
    out, ranks = _torchrun_probed(tiny, tmp_path, "--fsdp-shard")
    names = ranks[0]["params"].keys()
    assert names and names == ranks[1]["params"].keys()
    for name in names:
        parts = [rank["params"][name] for rank in ranks]
        assert all(p["type"] == "DTensor" for p in parts), name
        assert all(p["placements"] == ["Shard(0)"] for p in parts), parts
        whole = math.prod(parts[0]["shape"])
        assert sum(p["local_numel"] for p in parts) == whole, name
        if parts[0]["shape"][0] >= 2:
            assert all(p["local_numel"] < whole for p in parts), name
    check_run(out, tmp_path / "run")


#: Sequence parallel at fp32 (``float32`` turns CPU autocast off) with AdamW (Muon
#: orthogonalizes in bf16), so two degrees' runs can be compared to fp32 rounding,
#: and a checkpoint in the middle of each epoch.
SP_FP32 = ["--draft-attn-impl", "eager", "--optimizer", "adamw"]
SP_FP32 += ["--hidden-states-dtype", "float32", "--checkpoint-freq", "0.5"]
#: Rank 1 SIGKILLs itself in this step: local step 8 of the second epoch (10
#: steps an epoch), after that epoch's mid-epoch checkpoint at local step 5.
KILL_STEP = 17
#: Final fp32 weights of the resumed runs at degree 2 and 1 agree to this (both
#: measured 6e-8: fp32 rounding of one sum over ranks against one per process).
RESUME_ATOL = 1e-6


def _sha256(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
    }


def _resumed(
    cmd: list[str], save: Path, probe: Path, env: dict[str, str]
) -> tuple[str, dict[str, torch.Tensor]]:
    """Run ``cmd`` (a resume of ``save``): its output and final fp32 weights."""
    out = run(cmd, cwd=save.parent, env={**env, **WIDE}, timeout=600)
    text = out.stdout + out.stderr
    assert "Resuming mid-epoch from epoch=1 local_step=5 global_step=15." in text
    state = json.loads((save / "checkpoints" / "1" / "training_state.json").read_text())
    assert state["global_step"] == 20, state
    return text, torch.load(probe / "final.pt")


@pytest.mark.slow
def test_torchrun_sequence_parallel_killed_rank_and_resume(tiny, tmp_path):
    """``--sp-size 2`` (unit 0027) on two gloo ranks (one SP group): it trains and
    checkpoints; rank 1 SIGKILLed mid-step ends the run within torchrun's grace
    and leaves the last checkpoint (mid-epoch) byte for byte; it reloads; the
    rerun on one process resumes it and ends where a rerun at degree 2 ends."""
    spec, verifier, data = tiny
    base = train_command(spec, verifier, data, tmp_path / "run", max_steps=STEPS)
    argv = [*_resumable(base, epochs=2)[2:], *SP_FP32]
    save, probe = tmp_path / "run", tmp_path / "probe"
    env = {"SPECULATORS_KIMI_PROBE": str(probe)}
    cmd = torchrun_train([*argv, "--sp-size", "2"], probe=True)
    killed = run(
        cmd, env={**env, "SPECULATORS_KIMI_KILL": f"1:{KILL_STEP}"}, check=False
    )
    ended = time.time()
    out = killed.stdout + killed.stderr
    assert killed.returncode != 0, out[-3000:]
    assert out.count("dp_size=1, sp_size=2") == 2, out[-3000:]
    for rank in (json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)):
        assert (rank["backend"], rank["model_class"]) == (
            "gloo",
            "DistributedDataParallel",
        )
    report = json.loads((probe / "killed.json").read_text())
    assert re.search(r"rank\s+: 1 \(local_rank: 1\)\n\s+exitcode\s+: -9", out), out[
        -3000:
    ]
    # torchrun SIGTERMs the survivors (SIGKILL after 30 s): no hang on gloo.
    assert ended - report["time"] < 60, ended - report["time"]
    ckpts = save / "checkpoints"
    last = ckpts / "1"
    assert report["checkpoint"] == str(last)
    assert _sha256(last) == report["sha256"]
    assert sorted(
        d.name for d in ckpts.iterdir() if not d.is_symlink() and d.is_dir()
    ) == ["0", "1"]
    state = json.loads((last / "training_state.json").read_text())
    assert state == {"epoch": 1, "local_step": 5, "global_step": 15}
    topology = json.loads((last / "training_topology.json").read_text())
    assert topology == {"world_size": 2, "sp_size": 2, "dp_size": 1}
    saved = load_file(last / "model.safetensors")
    params = Eagle3DraftModel.from_pretrained(last).state_dict()
    for key, tensor in saved.items():
        assert torch.equal(params[key].to(tensor.dtype), tensor), key

    shutil.copytree(save, tmp_path / "ref", symlinks=True)
    text, one = _resumed(
        [sys.executable, str(SUPPORT / "distributed_probe.py"), *argv],
        save,
        probe,
        env,
    )
    assert (
        "at world size 1 and --sp-size 1 (saved at 2 and 2): the same "
        "data-parallel size 1" in text
    ), text[-3000:]
    (probe / "final.pt").unlink()
    ref = [a.replace(str(save), str(tmp_path / "ref")) for a in argv]
    _, two = _resumed(
        torchrun_train([*ref, "--sp-size", "2"], probe=True),
        tmp_path / "ref",
        probe,
        env,
    )
    assert one.keys() == two.keys()
    assert "fc.weight" in one and one.keys() <= saved.keys()
    for key, weight in one.items():
        assert (weight - two[key]).abs().max() <= RESUME_ATOL, key
        # Both trained on: the tolerance is far below what 5 steps move.
        assert (weight - saved[key].float()).abs().max() > 1000 * RESUME_ATOL, key


def test_sp_size_the_world_cannot_hold_is_one_line(tiny, tmp_path, monkeypatch, capsys):
    spec, verifier, data = tiny
    argv = train_command(spec, verifier, data, tmp_path / "run", max_steps=STEPS)
    argv += ["--sp-size", "2"]
    code, out = console_in_process(argv, monkeypatch, capsys)
    assert code == 1
    errors = [line for line in out.splitlines() if "ConfigError" in line]
    assert errors == [
        "error: ConfigError: --sp-size 2 must divide the world size 1; launch a "
        "multiple of 2 processes with torchrun or lower --sp-size."
    ], out[-3000:]
    assert not (tmp_path / "run" / "checkpoints" / "0").exists()


def test_explicit_flex_attention_on_cpu_is_a_clear_error(
    tiny, tmp_path, monkeypatch, capsys
):
    spec, verifier, data = tiny
    argv = train_command(spec, verifier, data, tmp_path / "run", max_steps=STEPS)
    argv += ["--draft-attn-impl", "simple_flex_attention"]
    code, out = console_in_process(argv, monkeypatch, capsys)
    assert code not in (0, None)
    assert "simple_flex_attention cannot train on CPU" in out
    assert "sdpa" in out
    assert not (tmp_path / "run" / "checkpoints" / "0").exists()
    shutil.rmtree(tmp_path / "run", ignore_errors=True)


def test_torchrun_reports_a_known_error_once_and_in_its_summary(tmp_path):
    missing = tmp_path / "no-such-verifier"
    proc = run(
        [str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_port"]
        + [str(free_port()), "-m", "speculators.train"]
        + ["--verifier-name-or-path", str(missing), "--data-path", str(tmp_path)],
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    # Our one line, once (rank 0); then torchrun's own failure report, whose summary
    # (the last thing it prints) gives each failed rank's line, not a link to torch's
    # docs (a rank torchrun stopped first may show its signal).
    line = f"error: ModelSourceError: --verifier-name-or-path {missing}: the local "
    ours, _, summary = proc.stderr.partition("ChildFailedError")
    assert ours.count(line) == 1, proc.stderr[-3000:]
    root_cause = summary.split("Root Cause")[-1]
    assert f"traceback : {line}" in root_cause, summary
    assert "To enable traceback" not in summary
