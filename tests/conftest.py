import os
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, clean_copy, demo_command, json_report, pinned_sdist, run

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
#: Session fixtures several files share, and the files that use them: under
#: ``pytest -n`` (pytest-xdist, as the project's pytest settings run it) those files
#: run on one worker, so each demo is trained once per run.
SHARED_DEMOS = {"trained_demo", "trained_mla_demo"}
DEMO_FILES = {
    "tests/kernels/test_backend_triton.py",
    "tests/demo/test_demo.py",
    "tests/tools/test_dropin.py",
    "tests/evaluate/test_evaluate.py",
    "tests/export/test_export.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if HEAVY_FIXTURES & names:
            item.add_marker(pytest.mark.slow)
        where = item.nodeid.split("::", 1)[0]
        if SHARED_DEMOS & names and where not in DEMO_FILES:
            raise pytest.UsageError(
                f"{where} uses {sorted(SHARED_DEMOS & names)}: add it to DEMO_FILES "
                "in tests/conftest.py (its tests then share the demos' worker)"
            )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4 (the suite's memory is sized
    for that; CI has 2 cores)."""
    return max(1, min(os.cpu_count() or 1, 4))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole files per worker (their module fixtures built once), the files in
    ``DEMO_FILES`` all on one (pytest-xdist's own ``xdist_group`` does not work
    with pytest 9.2, whose items ignore the node id xdist rewrites)."""
    from xdist.scheduler import LoadFileScheduling

    class DemoFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            where = nodeid.split("::", 1)[0]
            return "demo files" if where in DEMO_FILES else where

    return DemoFilesTogether(config, log)


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
def trained_demo(tmp_path_factory) -> dict:
    """The demo CLI run once per session (80 conversations, 3 epochs): its report
    (with the acceptance of the trained and untrained drafts) and, under
    ``"stdout"``, what it printed. Tests that rerun it work on a copy of ``out``."""
    out = tmp_path_factory.mktemp("trained-demo") / "demo"
    stdout = run(demo_command(out), timeout=1200).stdout
    return {**json_report(stdout), "stdout": stdout}


@pytest.fixture(scope="session")
def trained_mla_demo(tmp_path_factory) -> dict:
    """A small demo with an MLA draft (`--draft-arch deepseek_v3`: DeepSeek-V3
    latent attention layers; 40 conversations, 4 steps), trained by `speculators
    train --draft-attn-impl triton` (our kernels, in the Triton interpreter), and
    a DSpark draft beside it on the same data (`--block-drafter dspark`): its
    report."""
    from speculators_kimi.demo import DemoSettings, run_demo

    out = tmp_path_factory.mktemp("trained-mla-demo")
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
