"""Block drafters (DFlash, DFlash2, DSpark, XPress) in ``evaluate``: the decode
loop's block proposals against upstream's training forward, and lossless
decoding on the tiny Kimi-K2.5 (nested ``text_config``, ``language_model.``
keys).

The drafts are built by ``speculators train``'s own functions (``TrainConfig``,
``build_draft_model``) on the tiny verifier, in this process, with random
trainable weights and the verifier's exact embedding and head."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from speculators_kimi import tiny_verifier as tiny
from speculators_kimi.errors import CommandError
from speculators_kimi.evaluate import EvaluationSession
from speculators_kimi.evaluate.algorithms import (
    UnsupportedDraftError,
    check_decodable,
)
from speculators_kimi.evaluate.block_draft import BlockDraftRunner
from speculators_kimi.evaluate.decode import DraftRequest
from speculators_kimi.verifier.causal import CausalVerifier, load_causal_verifier

BLOCK = 4


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> Path:
    return tiny.kimi_k25(tmp_path_factory.mktemp("block") / "verifier").path


def _build(verifier: Path, data: Path, algorithm: str, *extra: str) -> Any:
    """The draft ``speculators train --speculator-type ALGORITHM`` builds."""
    from speculators.model import SpeculatorModel
    from speculators.train import cli
    from speculators.train.config import TrainConfig

    data.mkdir(exist_ok=True)
    argv = [
        "--verifier-name-or-path",
        str(verifier),
        "--data-path",
        str(data),
        "--speculator-type",
        algorithm,
        "--block-size",
        str(BLOCK),
        "--draft-attn-impl",
        "sdpa",
        "--num-layers",
        "2",
        *extra,
    ]
    args = argparse.Namespace(**TrainConfig.resolve(argv).flatten())
    d2t, t2d, vocab = cli.parse_vocab_mappings(args)
    torch.manual_seed(0)
    model_class = SpeculatorModel.registry[algorithm]
    draft = cli.build_draft_model(args, model_class, t2d, d2t, vocab)
    with torch.no_grad():  # away from init, so every module changes the logits
        for p in draft.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return draft.eval()


@pytest.fixture(scope="module")
def verifier(kimi) -> CausalVerifier:
    """The tiny Kimi-K2.5 on the trainer's default aux layers (every draft's)."""
    from speculators.models.utils import resolve_target_layer_ids

    layers = resolve_target_layer_ids(None, str(kimi))
    return load_causal_verifier(kimi, layers, dtype=torch.float32, device="cpu")


def _loud(draft: Any) -> Any:
    """The draft with its sequential head (DSpark's Markov bias, DFlash2's
    selector) scaled up, so that it decides the argmax: a walk fed the wrong
    token before then picks other tokens."""
    head = getattr(draft, "markov_head", None) or draft.candidate_selector
    with torch.no_grad():
        for p in head.parameters():
            p.mul_(30.0)
    return draft


def _loud_refiner(draft: Any) -> Any:
    """The XPress draft with its refiner's token embedding and readout scaled
    up, so that its bias, led by the block's previous tokens, decides the
    argmax over the base logits."""
    with torch.no_grad():
        draft.refiner_head.token_embed.weight.mul_(30.0)
        draft.refiner_head.readout.weight.mul_(30.0)
    return draft


@pytest.fixture(scope="module")
def drafts(kimi, tmp_path_factory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("block-data")
    return {
        "dflash": _build(kimi, data, "dflash"),
        "dspark": _loud(_build(kimi, data, "dspark")),
        # Slot 0 is the anchor's: slot k's Markov bias reads token k - 1.
        "dspark-nsfa": _loud(_build(kimi, data, "dspark", "--no-sample-from-anchor")),
        "dflash2": _loud(_build(kimi, data, "dflash2", "--selector-top-k", "4")),
        "xpress": _loud_refiner(_build(kimi, data, "xpress", "--xpress-rank", "32")),
        # MLA layers in the verifier's latent layout (the full vocabulary).
        "dspark-mla": _build(kimi, data, "dspark", "--draft-arch", "deepseek_v3"),
        "dflash-mla": _build(kimi, data, "dflash", "--draft-arch", "deepseek_v3"),
        # A full-attention layer (bidirectional inside the block) and a sliding
        # one trained non-causal.
        "dflash-mixed": _build(
            kimi,
            data,
            "dflash",
            "--full-attention-indices",
            "0",
            "--sliding-window-non-causal",
        ),
    }


def _ids(n: int, vocab: int) -> list[int]:
    gen = torch.Generator().manual_seed(3)
    return torch.randint(8, vocab - 1, (n,), generator=gen).tolist()


def _training_logits(
    draft: Any, ids: list[int], aux: torch.Tensor, anchor: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Upstream's training forward with one anchor at ``anchor``: the block's
    hidden states and logits, and the logits with DSpark's Markov bias from
    the block's own tokens."""
    n = len(ids)
    loss_mask = torch.zeros(1, n, dtype=torch.long)
    loss_mask[0, anchor] = 1  # the only valid anchor
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        hidden, logits, _, _, index = draft._backbone_forward(
            hidden_states=aux[None],
            input_ids=input_ids,
            loss_mask=loss_mask,
            verifier_last_hidden_states=torch.zeros(1, n, draft.hidden_size),
            document_ids=torch.zeros(1, n, dtype=torch.long),
            max_anchors=1,
        )
        biased = logits
        block = input_ids[0, index].view(1, BLOCK)
        if not draft.config.sample_from_anchor:  # slot k follows token k - 1
            block = torch.cat([block[:, :1], block[:, :-1]], dim=1)
        head = getattr(draft, "markov_head", None)
        if head is not None:
            biased = logits + head.block_bias(
                prev_token_ids=block, hidden_states=hidden.view(1, BLOCK, -1)
            )
        selector = getattr(draft, "candidate_selector", None)
        if selector is not None:  # DFlash2: the top-K, rescored
            candidates = logits.topk(selector.top_k, dim=-1).indices
            scores = selector.score_candidates(logits, hidden, block, candidates)
            biased = torch.full_like(logits, float("-inf"))
            biased.scatter_(-1, candidates, scores)
    return hidden.view(BLOCK, -1), logits[0], biased[0]


@pytest.mark.parametrize(
    "name", ["dflash", "dspark", "dspark-nsfa", "dflash2", "dflash-mixed"]
)
@pytest.mark.parametrize("window", [None, 5])
def test_block_proposals_are_the_training_forwards_argmax(
    verifier, drafts, name, window
):
    """The runner's block (context K/V cached over two rounds, the block's
    dropped) computes upstream's training forward at the same anchor: the same
    logits, and greedy proposals that are the training forward's argmax with
    those proposals as the block's tokens (DSpark's Markov chain and DFlash2's
    selector walk included). A
    sliding window of 5 checks the window and causal-block masks."""
    draft = drafts[name]
    assert draft.uses_full_attn == (name == "dflash-mixed")
    assert draft.sliding_window_non_causal == (name in ("dflash-mixed", "dflash2"))
    saved = draft.sliding_window
    draft.sliding_window = window or saved
    try:
        _check_block_proposals(verifier, draft)
    finally:
        draft.sliding_window = saved


@pytest.mark.parametrize("name", ["dspark-mla", "dflash-mla"])
def test_mla_block_proposals_are_the_training_forwards_argmax(verifier, drafts, name):
    """``--draft-arch deepseek_v3``: the runner caches each layer's latent page
    (``kv_lora_rank + qk_rope_head_dim`` per context position, as the verifier
    does) and its block is upstream's training forward at the same anchor, full
    attention and bidirectional inside the block."""
    draft = drafts[name]
    assert type(draft.layers[0]).__name__ == "DeepseekV3DFlashDecoderLayer"
    assert draft.uses_full_attn and not draft.sliding_window_indices
    _check_block_proposals(verifier, draft)
    text = draft.config.transformer_layer_config
    runner = BlockDraftRunner(draft, "cpu")
    _, aux = verifier.forward(_ids(9, draft.verifier_vocab_size), DynamicCache())
    runner.block_hidden(5, aux[:8], BLOCK)
    layer: Any = runner.cache.layers[0]
    latent, rope = layer.keys, layer.values
    assert latent.shape == (1, 1, 8, text.kv_lora_rank)
    assert rope.shape == (1, 1, 8, text.qk_rope_head_dim)


def _check_block_proposals(verifier: CausalVerifier, draft: Any) -> None:
    assert list(draft.target_layer_ids) == verifier.layer_ids
    vocab = draft.verifier_vocab_size
    ids = _ids(24, vocab)
    _, aux = verifier.forward(ids, DynamicCache())
    runner = BlockDraftRunner(draft, "cpu")
    first = 0 if draft.config.sample_from_anchor else 1
    k = BLOCK - first
    gen = torch.Generator()
    for anchor in (6, 15):
        # Round one caches positions < 4; round two adds the rest.
        runner.reset()
        runner.propose(DraftRequest(ids[:5], aux[:4], 0, k, 0.0, gen))
        assert runner.length == 4
        hidden = runner.block_hidden(ids[anchor], aux[4:anchor], BLOCK)
        assert runner.length == anchor
        got = draft.lm_head(hidden)
        proposed, _ = runner.propose(
            DraftRequest(ids[: anchor + 1], aux[anchor:anchor], anchor, k, 0.0, gen)
        )
        # The proposals become the block's tokens (teacher forcing).
        after = anchor + 1 + len(proposed)
        forced = [*ids[: anchor + 1], *proposed, *ids[after:]]
        _, want, biased = _training_logits(draft, forced, aux, anchor)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        picks = biased.argmax(-1)[first:].tolist()
        assert proposed == picks, anchor


def test_xpress_block_is_the_sequential_decode_of_the_training_forward(
    verifier, drafts
):
    """XPress: the runner's block is the fixed point of the refiner over
    upstream's training forward, which Jacobi passes reach when there are at
    least B - 1 of them and top-C keeps the whole vocabulary (the tiny Kimi's
    512 tokens): each slot the argmax of its base logits plus the refiner's
    bias for the tokens before it (the anchor standing in for its own
    predecessor, as vLLM's speculator has it). The refiner decides some slots
    (they differ from the base argmax). Sampled, each token's draft
    distribution is all its mass (vLLM keeps none for XPress)."""
    draft = drafts["xpress"]
    assert draft.config.num_jacobi_passes >= BLOCK - 1
    vocab = draft.verifier_vocab_size
    ids = _ids(24, vocab)
    _, aux = verifier.forward(ids, DynamicCache())
    runner = BlockDraftRunner(draft, "cpu")
    gen = torch.Generator().manual_seed(0)
    decided = 0
    for anchor in (6, 11, 15):
        runner.reset()
        request = DraftRequest(ids[: anchor + 1], aux[:anchor], 0, BLOCK - 1, 0.0, gen)
        proposed, dists = runner.propose(request)
        assert dists == [None] * (BLOCK - 1)
        hidden, base, _ = _training_logits(draft, ids, aux, anchor)
        tokens: list[int] = []
        for slot in range(1, BLOCK):
            before = [ids[anchor], ids[anchor], *tokens]
            previous = torch.tensor(before + [0] * (BLOCK - len(before)))
            with torch.no_grad():
                bias = draft.refiner_head.block_bias(
                    previous[None], hidden_states=hidden[None]
                )[0, slot]
            tokens.append(int((base[slot] + bias).argmax()))
        assert proposed == tokens, anchor
        decided += proposed != base[1:].argmax(-1).tolist()
        runner.reset()
        sampled = DraftRequest(ids[: anchor + 1], aux[:anchor], 0, BLOCK - 1, 1.0, gen)
        again, dists = runner.propose(sampled)
        assert again == proposed
        for token, q in zip(again, dists, strict=True):
            assert q is not None and float(q[token]) == 1.0 and float(q.sum()) == 1.0
    assert decided, "the refiner never changed a token: the test cannot fail"
    with pytest.raises(ValueError, match="block whole"):
        runner.propose(DraftRequest(ids[:7], aux[:6], 0, BLOCK - 2, 0.0, gen))


@pytest.mark.parametrize(
    "name", ["dflash", "dspark", "dflash2", "dspark-mla", "xpress"]
)
def test_block_drafters_decode_losslessly(verifier, drafts, name):
    """``evaluate`` with a block drafter on the tiny Kimi-K2.5: greedy output
    equals the verifier's own, acceptance length reported; a block asked for
    more tokens than it proposes is refused, naming the limit."""
    from speculators_kimi.evaluate.prompts import Prompt

    draft = drafts[name]
    session = EvaluationSession(draft, verifier)
    prompts = [
        Prompt(source=f"p{i}", token_ids=_ids(10 + i, draft.verifier_vocab_size))
        for i in range(2)
    ]
    k = BLOCK - (0 if draft.config.sample_from_anchor else 1)
    report = session.evaluate(
        prompts, num_speculative_tokens=k, max_new_tokens=12, progress=False
    )
    assert report.lossless, report.mismatched_prompts
    assert report.mean_acceptance_length >= 1.0
    assert len(report.acceptance_rate_per_position) == k
    with pytest.raises(ValueError, match=f"at most {k} tokens"):
        session.evaluate(
            prompts, num_speculative_tokens=k + 1, max_new_tokens=4, progress=False
        )


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [
        ("peagle", "P-EAGLE"),
        ("mtp", "MTP layer"),
        ("medusa", "'medusa' is no draft speculators trains"),
    ],
)
def test_undecoded_algorithms_are_refused_from_the_config(algorithm, why):
    with pytest.raises(UnsupportedDraftError, match=why):
        check_decodable("ckpt", {"speculators_model_type": algorithm})
    check_decodable("ckpt", {"speculators_model_type": "dspark"})


def test_xpress_that_vllm_does_not_serve_is_refused_from_the_config():
    """What vLLM's XPress cannot serve: a reduced vocabulary, the anchor
    sampling, an MLP its kernel would read past, a block not drafted whole (its
    mixer is the block's size)."""
    layer = {"model_type": "qwen3", "vocab_size": 512}
    config = {
        "speculators_model_type": "xpress",
        "transformer_layer_config": layer,
        "block_size": BLOCK,
        "sample_from_anchor": False,
    }
    check_decodable("ckpt", config, BLOCK - 1)
    with pytest.raises(UnsupportedDraftError, match="needs the verifier's \\(512\\)"):
        check_decodable("ckpt", {**config, "draft_vocab_size": 256})
    with pytest.raises(UnsupportedDraftError, match="fill-in layout"):
        check_decodable("ckpt", {**config, "sample_from_anchor": True})
    with pytest.raises(UnsupportedDraftError, match="multiple of 64"):
        check_decodable("ckpt", {**config, "xpress_rank": 16})
    with pytest.raises(CommandError, match=f"pass -k {BLOCK - 1}"):
        check_decodable("ckpt", config, BLOCK - 2)


@pytest.mark.parametrize(
    ("algorithm", "block", "anchor", "most"),
    [("dflash", 4, False, 3), ("dflash2", 4, False, 3), ("dspark", 4, True, 4)],
)
def test_k_past_the_block_is_refused_from_the_config(algorithm, block, anchor, most):
    """Before anything loads: a block of 4 without the anchor's slot proposes 3."""
    config = {
        "speculators_model_type": algorithm,
        "block_size": block,
        "sample_from_anchor": anchor,
    }
    check_decodable("ckpt", config, most)
    with pytest.raises(CommandError, match=f"at most {most} tokens.*-k {most} or"):
        check_decodable("ckpt", config, most + 1)
    check_decodable("ckpt", {**config, "speculators_model_type": "eagle3"}, most + 1)


@pytest.mark.parametrize(("aux", "fits"), [([1, 2, 4], True), ([1, 2, 5], False)])
def test_aux_layer_id_of_the_depth_is_the_last_layers_output(tmp_path, aux, fits):
    """Id ``num_hidden_layers`` is the last layer's output, as the trainer and
    the launcher take it (the tiny verifier's own datasets use it); one past it
    is another verifier's."""
    import json

    from speculators_kimi.verifier.fit import DraftMismatchError, check_draft_fits

    draft, verifier = tmp_path / "draft", tmp_path / "verifier"
    for path, config in (
        (draft, {"eagle_aux_hidden_state_layer_ids": aux}),
        (verifier, {"model_type": "llama", "num_hidden_layers": 4}),
    ):
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
    if fits:
        check_draft_fits(draft, verifier)
    else:
        with pytest.raises(DraftMismatchError, match=r"aux layers \[1, 2, 5\]"):
            check_draft_fits(draft, verifier)


def test_the_default_k_is_what_export_serves(drafts, kimi, tmp_path, capsys):
    """``-k`` defaulted to 3 for every draft, but a block drafter is served with
    its block (``export``'s num_speculative_tokens): ``evaluate --profile`` then
    ``export --profile`` was refused for measuring another K."""
    from speculators_kimi import cli
    from speculators_kimi.served import served_tokens

    checkpoint = tmp_path / "dspark"
    drafts["dspark"].save_pretrained(checkpoint)
    served = served_tokens(json.loads((checkpoint / "config.json").read_text()))
    prompts = tmp_path / "prompts.jsonl"
    turn = {"role": "user", "content": "w1 w2 w3"}
    prompts.write_text(json.dumps({"conversations": [turn]}) + "\n")
    report = tmp_path / "al.json"
    argv = ["evaluate", "--draft", str(checkpoint), "--verifier", str(kimi)]
    argv += ["--prompts", str(prompts), "--max-new-tokens", "4", "--json", str(report)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert json.loads(report.read_text())["num_speculative_tokens"] == served != 3
