"""A hybrid verifier's cache taken back to the accepted tokens (``verifier/cache.py``).

On tiny Qwen3.5 and Kimi-Linear checkpoints built by transformers' own classes
(gated-deltanet and KDA layers beside attention): after a verify forward of a
draft, taking the cache back to any number of accepted tokens gives the next
token the same logits as a fresh prefill of exactly those tokens. transformers'
own record-and-crop route does not (the negative control: it rolls back only the
conv window, not the recurrent state). DeepSeek-V4 is refused with its reason.
"""

from __future__ import annotations

import pytest
import torch

from speculators_kimi import tiny_verifier as tiny
from speculators_kimi.verifier.cache import (
    has_recurrent_state,
    mark,
    rewind,
    verifier_cache,
)
from speculators_kimi.verifier.causal import CausalVerifier, load_causal_verifier

BUILDS = {"qwen3.5": tiny.qwen3_5, "kimi-linear": tiny.kimi_linear}
PROMPT = [9, 40, 17, 33, 8, 99, 41, 7, 12, 60, 21]
#: A verify forward: the verifier's own next token, then four draft tokens.
VERIFY = [5, 70, 23, 88, 130]
NEXT = 44


@pytest.fixture(scope="module", params=list(BUILDS))
def verifier(request, tmp_path_factory) -> CausalVerifier:
    path = BUILDS[request.param](tmp_path_factory.mktemp(request.param)).path
    return load_causal_verifier(path, [2, 4, 5], dtype=torch.float32)


def _fresh_next_logits(verifier: CausalVerifier, tokens: list[int]) -> torch.Tensor:
    cache = verifier_cache(verifier.decoder)
    verifier.forward(tokens, cache)
    return verifier.forward([NEXT], cache)[0][-1]


@pytest.mark.parametrize("accepted", [0, 2])
def test_rewind_equals_a_fresh_prefill(verifier, accepted):
    cache = verifier_cache(verifier.decoder)
    verifier.forward(PROMPT, cache)
    assert has_recurrent_state(cache)
    before = mark(cache, len(PROMPT))
    verifier.forward(VERIFY, cache)
    kept = VERIFY[: accepted + 1]
    rewind(cache, before, kept, lambda tokens: verifier.forward(tokens, cache))
    assert cache.get_seq_length() == len(PROMPT) + len(kept)
    got = verifier.forward([NEXT], cache)[0][-1]
    want = _fresh_next_logits(verifier, PROMPT + kept)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_record_and_crop_is_not_a_rollback(verifier):
    """The negative control: transformers' own crop leaves the rejected tokens in
    the recurrent state, so the next logits differ from a fresh prefill's."""
    cache = verifier_cache(verifier.decoder)
    verifier.forward(PROMPT, cache)
    cache.activate_past_recording()
    verifier.forward(VERIFY, cache)
    cache.crop(-(len(VERIFY) - 1))
    got = verifier.forward([NEXT], cache)[0][-1]
    want = _fresh_next_logits(verifier, PROMPT + VERIFY[:1])
    assert float((got - want).abs().max()) > 1e-3


def test_a_plain_verifier_keeps_the_plain_cache(tmp_path):
    path = tiny.llama(tiny.TinyVerifierSpec(num_samples=2), tmp_path / "llama").path
    verifier = load_causal_verifier(path, [2, 4, 5], dtype=torch.float32)
    cache = verifier_cache(verifier.decoder)
    verifier.forward(PROMPT, cache)
    assert not has_recurrent_state(cache)
    assert not mark(cache, len(PROMPT)).saved  # cropped, never copied


def test_deepseek_v4_is_refused_with_its_reason(tmp_path, capsys):
    """Hyper-connection streams: refused before any work by hidden-state
    generation and doctor; the capture itself rejects states that are not
    [batch, seq, hidden]."""
    from datasets import Dataset
    from speculators.utils.verifier_weights import VerifierWeightsError

    from speculators_kimi import cli
    from speculators_kimi.datagen import generate_hidden_states
    from speculators_kimi.verifier import capture_hidden_states

    built = tiny.deepseek_v4(tmp_path / "v4")
    data = tmp_path / "data"  # one row, as prepare-data writes it
    row = {"input_ids": [PROMPT], "loss_mask": [[1] * len(PROMPT)]}
    Dataset.from_dict({**row, "seq_len": [len(PROMPT)]}).save_to_disk(str(data))
    with pytest.raises(VerifierWeightsError, match="hc_mult=2 hyper-connection"):
        generate_hidden_states(built.path, data, progress=False)
    assert not list(data.rglob("hs_*.safetensors"))  # no sample written
    assert cli.main(["doctor", str(built.path)]) == 1
    out = capsys.readouterr().out
    assert "cannot be an EAGLE-3 verifier" in out and "No flag fixes this" in out
    with pytest.raises(ValueError, match=r"not \[batch, seq, hidden\]: EAGLE-3"):
        capture_hidden_states(built.model.model, torch.tensor([PROMPT]), [2, 4, 5])
