"""Every upstream algorithm on every nested verifier layout of the zoo.

For each nested member (Kimi-K2.5 as shipped, with remote code, sharded; Gemma-3;
Qwen2.5-VL; Llama-4; Qwen2.5-Omni's ``thinker_config.text_config``; Qwen3.5) the
hidden states are generated once (module fixture), then each of upstream's
block and parallel drafters (``dflash``, ``dflash2``, ``dspark``, ``xpress``,
``peagle``; EAGLE-3 is :mod:`test_zoo_train`'s) takes one training step in this
process through upstream's own functions (the batch preprocessed as ``main``
does for the type), with the full vocabulary and, where the algorithm takes one,
a reduced one. The loss is finite, every trainable parameter has a finite
gradient, and after an AdamW step the tensors the algorithm reads from the
verifier are still exactly the verifier's: the embedding (which also embeds the
mask token), the output head (its draft-vocabulary rows), the final norm as a
function, and the mask token id is the one the verifier's tokenizer gives.

What cannot train is refused by ``speculators train`` before any work (unit
``0025-train-speculator-checks``): MTP on every nested layout (none has an MTP
layer that speculators can train), DFlash2 with a reduced vocabulary.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from test_zoo_train import ZOO, _dataset, _train_step_in_process

from speculators_kimi import tiny_verifier as tiny
from speculators_kimi.datagen import generate_hidden_states

#: The zoo's nested layouts: the text model under ``text_config`` (or Omni's
#: ``thinker_config.text_config``) beside other towers.
NESTED = (
    "kimi-k25",
    "kimi-k25-remote",
    "kimi-k25-sharded",
    "gemma3",
    "qwen2.5-vl",
    "llama4",
    "qwen2.5-omni",
    "qwen3.5",
)
#: (algorithm, reduced draft vocabulary): all five with the full one; with half
#: the verifier's, one of the DFlash family (dflash and xpress read the head's
#: rows the same way) and P-EAGLE (dflash2 needs the full one: refused below).
CASES = [
    *((a, False) for a in ("dflash", "dflash2", "dspark", "xpress", "peagle")),
    *((a, True) for a in ("dspark", "peagle")),
]
#: Tiny blocks and heads: two draft layers (one sliding-window, one full
#: attention, so both masks are built), blocks of 4, 4 anchors.
SMALL = [
    *("--num-layers", "2", "--full-attention-indices", "1"),
    *("--block-size", "4", "--max-anchors", "4"),
    *("--selector-rank", "8", "--markov-rank", "8", "--xpress-rank", "8"),
    *("--num-depths", "3"),
]


@pytest.fixture(scope="module", params=NESTED)
def generated(request, tmp_path_factory) -> dict[str, Any]:
    """The member, its dataset (with token frequencies, for a reduced draft
    vocabulary) and its hidden states, made once for every algorithm."""
    root = tmp_path_factory.mktemp(request.param)
    zoo = ZOO[request.param](root / "verifier")
    vocab = int(zoo.embed.shape[0])
    data = _dataset(root / "data", vocab, n=4)
    freq = torch.bincount(torch.arange(vocab) % 97, minlength=vocab)
    torch.save({i: int(c) + 1 for i, c in enumerate(freq)}, data / "token_freq.pt")
    res = generate_hidden_states(zoo.path, data, progress=False)
    assert res.written == 4
    mask = _expected_mask_token_id(zoo.path, vocab)
    return {"member": request.param, "zoo": zoo, "data": data, "res": res, "mask": mask}


def _argv(gen: dict[str, Any], speculator_type: str, *extra: str) -> list[str]:
    zoo = gen["zoo"]
    save = gen["data"].parent / f"run-{speculator_type}"
    cmd = tiny.train_command(tiny.TinyVerifierSpec(), zoo.path, gen["data"], save)
    argv = [*cmd[2:], *zoo.train_args, *extra]
    argv[argv.index("--speculator-type") + 1] = speculator_type
    return argv


def _expected_mask_token_id(path: Path, vocab: int) -> int:
    """The mask token the verifier's own tokenizer gives (its mask token, else
    the first unused embedding row, else pad / eos / unk), read with
    transformers' tokenizer, not with the trainer's resolution."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.mask_token_id is not None:
        return int(tok.mask_token_id)
    if len(tok) < vocab:
        return len(tok)
    for ident in (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id):
        if ident is not None:
            return int(ident)
    raise AssertionError(f"{path}: no mask token to expect")


@pytest.mark.parametrize(
    ("algorithm", "reduced"), CASES, ids=[a + ("-reduced" * r) for a, r in CASES]
)
def test_block_drafter_trains_with_exact_verifier_tensors(
    generated, algorithm, reduced
):
    member, zoo = generated["member"], generated["zoo"]
    vocab = int(zoo.embed.shape[0])
    extra = ["--draft-vocab-size", str(vocab // 2)] if reduced else []
    draft: Any = _train_step_in_process(_argv(generated, algorithm, *SMALL, *extra))

    assert list(draft.target_layer_ids) == generated["res"].target_layer_ids
    trainable = [p for p in draft.parameters() if p.requires_grad]
    grads = [p.grad for p in trainable]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(bool(g.abs().sum()) for g in grads)

    # What the step started from: the verifier's own tensors, exactly.
    head = zoo.head
    if reduced:
        assert int(draft.draft_vocab_size) == vocab // 2
        head = head[draft.t2d.bool()]
    got = {k: v.detach().clone() for k, v in draft.state_dict().items()}
    truth = {
        "embed_tokens.weight": zoo.embed,  # also embeds the mask token
        "verifier_lm_head.weight": head,  # the targets
        "lm_head.weight": head,  # the draft's own logits start from it
    }
    for key, want in truth.items():
        assert torch.equal(got[key], want.to(got[key].dtype)), f"{member}: {key}"
    norm = draft.verifier_norm
    own = copy.deepcopy(zoo.norm).to(norm.weight.dtype).float()
    x = torch.randn(
        3, 5, zoo.embed.shape[1], generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        torch.testing.assert_close(norm.float()(x), own(x), rtol=1e-5, atol=1e-5)
    assert draft.config.mask_token_id == generated["mask"]

    # One AdamW step: every frozen tensor stays as loaded. P-EAGLE trains its
    # embedding by design (its config's embed_requires_grad defaults to True).
    assert draft.embed_tokens.weight.requires_grad == (algorithm == "peagle")
    for key in ("verifier_lm_head.weight", "lm_head.weight"):
        assert not draft.get_parameter(key).requires_grad, key
    assert not any(p.requires_grad for p in draft.verifier_norm.parameters())
    torch.optim.AdamW(trainable, lr=1e-3).step()
    frozen = {n for n, p in draft.named_parameters() if not p.requires_grad}
    after = draft.state_dict()
    for key in frozen:
        assert torch.equal(after[key], got[key]), f"{member}: {key} moved"
    if zoo.marker is not None:
        assert not zoo.marker.exists(), "checkpoint code was imported"


@pytest.mark.parametrize(
    ("speculator_type", "flags", "reason"),
    [
        ("mtp", [], "fine-tunes the verifier's own multi-token prediction layer"),
        ("dflash2", ["--draft-vocab-size", "128"], "needs the verifier's full"),
    ],
    ids=["mtp", "dflash2-reduced"],
)
def test_refused_before_any_work(generated, speculator_type, flags, reason):
    """``main`` stops at its early checks: nothing saved, no vocabulary mapping
    cached in the data directory."""
    from speculators.train import cli
    from speculators.train.config import TrainConfig
    from speculators.train.config.resolution import ConfigError

    argv = _argv(generated, speculator_type, *flags)
    save = Path(argv[argv.index("--save-path") + 1])
    before = sorted(generated["data"].glob("*.npy"))
    with pytest.raises(ConfigError, match=reason) as raised:
        cli.main(TrainConfig.resolve(argv))
    assert "\n" not in str(raised.value)
    assert "--speculator-type" in str(raised.value)
    assert not save.exists()
    assert sorted(generated["data"].glob("*.npy")) == before


def test_refusal_is_one_line_from_the_command(tmp_path, monkeypatch, capsys):
    """As the user sees it: ``speculators train`` prints one line and exits 1
    (no hidden states needed: the check comes first)."""
    from speculators import __main__ as entry

    zoo = ZOO["kimi-k25"](tmp_path / "verifier")
    data = _dataset(tmp_path / "data", int(zoo.embed.shape[0]), n=2)
    gen = {"zoo": zoo, "data": data}
    monkeypatch.delenv("SPECULATORS_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["speculators", "train", *_argv(gen, "mtp")])
    with pytest.raises(SystemExit) as raised:
        entry.app()
    assert raised.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: ConfigError: --speculator-type mtp fine-tunes the verifier's own "
        "multi-token prediction layer, and the text model of "
        f"{zoo.path} ('kimi_k2') has none that speculators can train "
        "(MTP layers exist for qwen3, qwen3_5_moe_text, qwen3_5_text, qwen3_next); "
        "train a separate draft instead: --speculator-type dspark, dflash or eagle3."
    ], err
