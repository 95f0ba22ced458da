"""Tests for the pluggable draft attention backends."""

import contextlib
import textwrap
from typing import Any

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, create_mask
from transformers import Qwen3Config
from transformers.modeling_utils import AttentionInterface

from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.losses import resolve_loss_config
from speculators.models import attention_backends
from speculators.models.attention import create_float_mask
from speculators.models.attention_backends import (
    ENTRY_POINT_GROUP,
    DraftAttentionBackend,
    SdpaBackend,
    available_backends,
    get_backend,
)
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.models.eagle3.attention import (
    create_combined_mask_mod,
    extend_dense_mask_for_draft_tokens,
    extend_mask_for_draft_tokens,
)
from speculators.proposals.greedy import GreedyTokenProposalConfig
from speculators.train.config import TrainConfig
from speculators.train.config.resolution import build_parser
from speculators.train.device import cpu_attn_impls

BUILTINS = ["simple_flex_attention", "sdpa", "eager"]
SEQ_LEN = 128  # the flex BlockMask path needs a multiple of its 128 block size
VOCAB = 96
HIDDEN = 32
TTT_STEPS = 3


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch):
    """Undo any backend (and attention function) a test registers."""
    monkeypatch.setattr(
        DraftAttentionBackend, "registry", dict(DraftAttentionBackend.registry or {})
    )
    monkeypatch.setattr(attention_backends, "_INSTANCES", {})
    monkeypatch.setattr(attention_backends, "_TRIED_ENTRY_POINTS", set())
    monkeypatch.setattr(
        AttentionInterface, "_global_mapping", dict(AttentionInterface._global_mapping)
    )
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def _document_ids() -> torch.Tensor:
    # Three documents of uneven lengths, then padding.
    return torch.tensor([0] * 41 + [1] * 50 + [2] * 27 + [-1] * 10)


def _tiny_eagle3(attn_impl: str) -> Eagle3DraftModel:
    torch.manual_seed(0)
    layer_config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        layer_types=["full_attention", "sliding_attention"],
        use_sliding_window=True,
        sliding_window=5,
    )
    layer_config._attn_implementation = attn_impl
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=VOCAB,
        norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=[0, 1, 2],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=TTT_STEPS)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(
                name_or_path=None, architectures=["Qwen3ForCausalLM"]
            ),
        ),
    )
    model = Eagle3DraftModel(config)
    # Verifier-owned weights start as NaN until loaded; give them values.
    for weight in (
        model.embed_tokens.weight,
        model.lm_head.weight,
        model.verifier_lm_head.weight,
    ):
        torch.nn.init.normal_(weight, std=0.5)
    return model


def _run(attn_impl: str, backward: bool = True) -> dict[str, torch.Tensor]:
    """Loss and parameter gradients of one tiny Eagle3 step over 3 TTT steps."""
    model = _tiny_eagle3(attn_impl)
    gen = torch.Generator().manual_seed(1)
    document_ids = _document_ids().unsqueeze(0)
    grad_ctx = contextlib.nullcontext() if backward else torch.no_grad()
    with grad_ctx:
        _, loss, _ = model(
            hidden_states=torch.randn(1, SEQ_LEN, 3 * HIDDEN, generator=gen),
            input_ids=torch.randint(0, VOCAB, (1, SEQ_LEN), generator=gen),
            document_ids=document_ids,
            loss_mask=document_ids != -1,
            verifier_last_hidden_states=torch.randn(1, SEQ_LEN, HIDDEN, generator=gen),
            ttt_steps=TTT_STEPS,
            loss_config=resolve_loss_config("kl_div", "eager"),
        )
    result = {"loss": loss.detach()}
    if backward:
        loss.backward()
        result |= {
            name: param.grad
            for name, param in model.named_parameters()
            if param.grad is not None
        }
    return result


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------


def test_builtin_backends_registered():
    assert available_backends()[:3] == BUILTINS
    for name in BUILTINS:
        backend = get_backend(name)
        assert isinstance(backend, DraftAttentionBackend)
        assert backend.name == name
    assert "simple_flex_attention" in AttentionInterface._global_mapping


def test_unknown_backend_lists_available():
    with pytest.raises(ValueError, match="Unknown draft attention backend 'nope'") as e:
        get_backend("nope")
    for name in BUILTINS:
        assert name in str(e.value)


def test_register_rejects_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        DraftAttentionBackend.register("sdpa")(SdpaBackend)


def test_registered_class_is_found_by_name():
    @DraftAttentionBackend.register("sdpa_copy")
    class SdpaCopy(SdpaBackend):
        name = "sdpa_copy"

    assert isinstance(get_backend("sdpa_copy"), SdpaCopy)
    assert "sdpa_copy" in available_backends()
    assert "sdpa_copy" in cpu_attn_impls()


def test_device_support():
    assert not get_backend("simple_flex_attention").supports_device("cpu")
    for name in BUILTINS:
        assert get_backend(name).supports_device(torch.device("cuda", 0))
    assert cpu_attn_impls() == ("sdpa", "eager")


# ---------------------------------------------------------------------------
# Results unchanged: the built-in backends build and extend exactly the masks the
# Eagle3 TTT loop built before backends existed.
# ---------------------------------------------------------------------------


def _legacy_masks(attn_impl: str, sliding_window: int | None) -> list:
    doc_ids = _document_ids()
    mask_mod = create_combined_mask_mod(doc_ids, SEQ_LEN, sliding_window)
    sizes: dict[str, Any] = {"B": None, "H": None, "Q_LEN": SEQ_LEN, "KV_LEN": SEQ_LEN}
    mask: Any
    if attn_impl == "simple_flex_attention":
        mask = create_block_mask(mask_mod, **sizes, device="cpu")
    elif attn_impl == "eager":
        mask = create_float_mask(mask_mod, **sizes, device="cpu")
    else:
        mask = create_mask(mask_mod, **sizes, device="cpu")
    masks = [mask]
    for _ in range(TTT_STEPS - 1):
        if attn_impl == "simple_flex_attention":
            mask = extend_mask_for_draft_tokens(mask)
        else:
            mask = extend_dense_mask_for_draft_tokens(mask, SEQ_LEN)
        masks.append(mask)
    return masks


def _mask_tensors(mask) -> tuple[torch.Tensor, ...]:
    if isinstance(mask, torch.Tensor):
        return (mask,)
    return (
        mask.kv_num_blocks,
        mask.kv_indices,
        mask.full_kv_num_blocks,
        mask.full_kv_indices,
    )


@pytest.mark.parametrize("attn_impl", BUILTINS)
@pytest.mark.parametrize("sliding_window", [None, 5])
def test_builtin_masks_unchanged(attn_impl, sliding_window):
    backend = get_backend(attn_impl)
    mask = backend.build_mask(_document_ids(), SEQ_LEN, "cpu", sliding_window)
    for step, legacy in enumerate(_legacy_masks(attn_impl, sliding_window)):
        if step:
            mask = backend.extend_mask(mask, SEQ_LEN)
        for got, want in zip(_mask_tensors(mask), _mask_tensors(legacy), strict=True):
            assert got.dtype == want.dtype
            assert torch.equal(got, want), f"step {step}"


@pytest.fixture(scope="module")
def sdpa_reference() -> dict[str, torch.Tensor]:
    return _run("sdpa")


def test_eager_matches_sdpa(sdpa_reference):
    eager = _run("eager")
    assert eager.keys() == sdpa_reference.keys()
    assert len(eager) > 10  # loss + every trainable parameter
    for name, value in eager.items():
        torch.testing.assert_close(
            value, sdpa_reference[name], rtol=1e-5, atol=1e-6, msg=name
        )


def test_flex_forward_matches_sdpa(sdpa_reference):
    # flex_attention has no CPU backward; compare the forward loss.
    flex = _run("simple_flex_attention", backward=False)
    torch.testing.assert_close(
        flex["loss"], sdpa_reference["loss"], rtol=1e-5, atol=1e-6
    )


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


@pytest.fixture
def installed_backends(tmp_path, monkeypatch):
    """A real distribution on sys.path contributing one good, one broken backend."""
    package = tmp_path / "mytest_backend"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from transformers.integrations.sdpa_attention import (
                sdpa_attention_forward,
            )

            from speculators.models.attention_backends import SdpaBackend


            def attention(*args, **kwargs):
                return sdpa_attention_forward(*args, **kwargs)


            class MyTestBackend(SdpaBackend):
                name = "mytest"
                attention_function = staticmethod(attention)
            """
        )
    )
    dist_info = tmp_path / "mytest_backend-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mytest-backend\nVersion: 0.1\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        "mytest = mytest_backend:MyTestBackend\n"
        "broken = mytest_backend_missing:Nothing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    monkeypatch.delitem(__import__("sys").modules, "mytest_backend", raising=False)


@pytest.mark.usefixtures("installed_backends")
def test_entry_point_backend_found():
    backend = get_backend("mytest")
    assert type(backend).__name__ == "MyTestBackend"
    assert "mytest" in AttentionInterface._global_mapping
    assert backend.supports_device("cpu")


@pytest.mark.usefixtures("installed_backends")
def test_broken_entry_point_warns_without_breaking_others():
    with pytest.warns(UserWarning, match="'broken = mytest_backend_missing:Nothing'"):
        names = available_backends()
    # Built-ins first; other installed backends may follow alongside ours.
    assert names[: len(BUILTINS)] == list(BUILTINS)
    assert "mytest" in names
    assert "broken" not in names
    assert "mytest" in cpu_attn_impls()
    with pytest.raises(ValueError, match="Unknown draft attention backend 'broken'"):
        get_backend("broken")


@pytest.mark.usefixtures("installed_backends")
@pytest.mark.filterwarnings("ignore:Could not load draft attention backend")
def test_train_config_accepts_entry_point_backend(capsys):
    cfg = TrainConfig.resolve(
        [
            "--verifier-name-or-path",
            "verifier",
            "--data-path",
            "data",
            "--draft-attn-impl",
            "mytest",
        ]
    )
    assert cfg.draft.draft_attn_impl == "mytest"
    help_text = build_parser().format_help()
    assert "--draft-attn-impl {simple_flex_attention,sdpa,eager," in help_text
    assert "mytest" in help_text
    with pytest.raises(SystemExit):
        TrainConfig.resolve(
            ["--verifier-name-or-path", "v", "--data-path", "d"]
            + ["--draft-attn-impl", "nope"]
        )
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_train_config_yaml_rejects_unknown_backend():
    with pytest.raises(ValueError, match="Unknown draft attention backend 'nope'"):
        TrainConfig.from_flat({"draft_attn_impl": "nope"})


@pytest.mark.usefixtures("installed_backends")
def test_entry_point_backend_trains_eagle3(sdpa_reference):
    # The third-party backend dispatches through its own registered attention
    # function; as it wraps sdpa, the numbers must equal sdpa's.
    result = _run("mytest")
    assert result.keys() == sdpa_reference.keys()
    for name, value in result.items():
        assert torch.equal(value, sdpa_reference[name]), name
