"""`tools/verifier_sweep.py`: each causal LM's own logits against a draft's targets."""

import pytest
import verifier_sweep

#: Phi's head has a bias and its final norm is a LayerNorm (units 0041, 0042);
#: DeepSeek-V3 is Kimi-K2.5's MLA text model; Gemma-4's is a multimodal wrapper;
#: LFM2-MoE's config leaves its layer types unset (``UNSET_DEFAULTS``) and its
#: final norm has its own name (unit 0046); Cohere Compass's leaves its rotary
#: parameters unset, and it scales its logits (unit 0037), as vLLM's class does.
SWEPT = ["llama", "phi", "deepseek_v3", "gemma4", "lfm2_moe", "cohere_compass_text"]


def test_the_sweep_builds_and_passes_each_kind(capsys):
    assert verifier_sweep.main(SWEPT) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [[t, "ok"] for t in SWEPT]
    assert lines[-1] == f"{len(SWEPT)} ok"


def test_a_mismatch_fails_the_sweep(capsys, monkeypatch):
    monkeypatch.setattr(verifier_sweep, "TOLERANCE", -1.0)  # no logits match
    assert verifier_sweep.main(["llama"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 MISMATCH"


def test_an_unknown_model_type_is_refused():
    with pytest.raises(SystemExit):
        verifier_sweep.main(["no-such-model"])


def test_a_crash_fails_the_sweep(capsys, monkeypatch):
    """An exception other than a refusal's ValueError is a traceback for a user."""

    def crash(*_args):
        raise AttributeError("'OPTConfig' object has no attribute 'initializer_range'")

    monkeypatch.setattr(verifier_sweep, "_draft_targets", crash)
    assert verifier_sweep.main(["llama"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 CRASH"
