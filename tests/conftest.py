import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from helpers import ROOT, clean_copy, demo_command, demo_output, pinned_sdist, run

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # Each xdist worker (and what it starts) gets its share of the cores: torch's
    # default of one OpenMP thread per core, in every worker at once, oversubscribes
    # the machine (on 2 cores the whole run took 1374 s so, 1019 s with this).
    _share = (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(max(1, _share)))

#: Fixtures that take well over 20 s to build: a test that uses one is ``slow``
#: (the fast loop, ``pytest -m "not slow"``, leaves it to CI).
HEAVY_FIXTURES = {"trained_demo", "trained_mla_demo", "release"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4 (the suite's memory is sized
    for that; CI has 2 cores)."""
    return max(1, min(os.cpu_count() or 1, 4))


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory,
    worker_id: str,
    name: str,
    build: Callable[[Path], dict],
) -> dict:
    """``build(out)``'s report, built once per test run whatever the number of
    pytest-xdist workers, as its docs show ("Making session-scoped fixtures execute
    only once"): the first worker to take the lock builds into the run's shared
    temporary directory and writes the report; the others wait, then read it."""
    if worker_id == "master":  # not under xdist: this session is the run
        return json.loads(json.dumps(build(tmp_path_factory.mktemp(name))))
    shared = tmp_path_factory.getbasetemp().parent
    report = shared / f"{name}.json"
    with FileLock(f"{report}.lock"):
        if not report.is_file():
            out = shared / name
            shutil.rmtree(out, ignore_errors=True)  # a worker's failed attempt
            out.mkdir()
            report.write_text(json.dumps(build(out)))
        return json.loads(report.read_text())


@pytest.fixture(scope="session")
def upstream_sdist() -> Path:
    return pinned_sdist()


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A clean copy of the project (as a fresh clone would have it)."""
    return clean_copy(tmp_path / "project")


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def trained_demo(tmp_path_factory, worker_id) -> dict:
    """The demo CLI run once per test run (80 conversations, 3 epochs): its report
    (with the acceptance of the trained and untrained drafts) and, under
    ``"stdout"``, what it printed. Tests that rerun it work on a copy of ``out``."""

    def build(out: Path) -> dict:
        report, output = demo_output(run(demo_command(out / "demo"), timeout=1200))
        return {**report, "stdout": output}

    return once_per_run(tmp_path_factory, worker_id, "trained-demo", build)


@pytest.fixture(scope="session")
def trained_mla_demo(tmp_path_factory, worker_id) -> dict:
    """A small demo with an MLA draft (`--draft-arch deepseek_v3`: DeepSeek-V3
    latent attention layers; 40 conversations, 4 steps), trained by `speculators
    train --draft-attn-impl triton` (our kernels, in the Triton interpreter), and
    a DSpark draft beside it on the same data (`--block-drafter dspark`): its
    report, once per test run."""

    def build(out: Path) -> dict:
        from speculators_kimi.demo import DemoSettings, run_demo

        settings = DemoSettings(
            out=out,
            num_samples=40,
            epochs=1,
            max_steps=4,
            draft_arch="deepseek_v3",
            extra_train_args=["--draft-attn-impl", "triton"],
            block_drafter="dspark",
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TRITON_INTERPRET", "1")
            return run_demo(settings)

    return once_per_run(tmp_path_factory, worker_id, "trained-mla-demo", build)


@pytest.fixture
def tiny_draft_checkpoint(tmp_path) -> Path:
    """A random-weight EAGLE-3 draft (one Llama layer, hidden 32, vocabulary 64 of
    which the draft keeps 32) saved as `speculators train` saves one, for the
    tiny Llama verifier beside it (``<checkpoint>/../verifier``)."""
    import torch
    from transformers import AutoConfig

    from speculators_kimi.tiny_verifier import TinyVerifierSpec, build_verifier
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    spec = TinyVerifierSpec(
        hidden_size=32, intermediate_size=64, num_layers=4, num_words=56, num_samples=2
    )
    verifier = build_verifier(spec, tmp_path / "verifier")
    layer = AutoConfig.from_pretrained(verifier)
    layer.num_hidden_layers = 1
    draft = build_eagle3_draft(
        layer,
        draft_vocab_size=32,
        ttt_steps=2,
        verifier_architecture="LlamaForCausalLM",
        std=0.02,
    )
    draft.config.speculators_config.verifier.name_or_path = str(verifier)
    t2d = torch.zeros(spec.vocab_size, dtype=torch.bool)
    t2d[::2] = True
    draft.load_vocab_mappings(t2d, torch.arange(32) * 2 - torch.arange(32))
    ckpt = tmp_path / "checkpoint"
    draft.save_pretrained(ckpt)
    return ckpt
