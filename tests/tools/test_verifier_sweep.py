"""`tools/verifier_sweep.py`: each causal LM's own logits against a draft's targets."""

import pytest
import verifier_sweep


def test_the_sweep_passes_phi_and_llama(capsys):
    """Phi's head has a bias and its final norm is a LayerNorm (units 0041, 0042)."""
    assert verifier_sweep.main(["llama", "phi"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:2]] == [["llama", "ok"], ["phi", "ok"]]
    assert lines[-1] == "2 ok"


def test_a_mismatch_fails_the_sweep(capsys, monkeypatch):
    monkeypatch.setattr(verifier_sweep, "TOLERANCE", -1.0)  # no logits match
    assert verifier_sweep.main(["llama"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 MISMATCH"


def test_an_unknown_model_type_is_refused():
    with pytest.raises(SystemExit):
        verifier_sweep.main(["no-such-model"])
