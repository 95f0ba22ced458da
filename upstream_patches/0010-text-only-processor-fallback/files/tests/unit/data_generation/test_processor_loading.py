import importlib.abc
import sys

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import (
    Kimi_K25Config,
    LlamaConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from speculators.data_generation.preprocessing import load_processor
from speculators.data_generation.processor_loading import load_text_processor
from tests.unit.mock.chat_tokenizers import write_kimi_tokenizer

WORDS = ["<pad>", "<unk>", "hello", "world", "user", "assistant"]


def _save_tokenizer(path):
    vocab = {word: i for i, word in enumerate(WORDS)}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    )
    tokenizer.save_pretrained(path)


def test_multimodal_verifier_without_image_processor_falls_back(tmp_path, caplog):
    # A Kimi-K2.5 wrapper config with a tokenizer but no image processor files.
    Kimi_K25Config().save_pretrained(tmp_path)
    _save_tokenizer(tmp_path)
    processor = load_text_processor(str(tmp_path))
    assert isinstance(processor, PreTrainedTokenizerBase)
    assert processor("hello world")["input_ids"] == [2, 3]
    assert "using its tokenizer alone" in caplog.text
    # The upstream entry point goes through it too.
    assert isinstance(load_processor(str(tmp_path)), PreTrainedTokenizerBase)


def test_text_verifier_loads_without_warning(tmp_path, caplog):
    LlamaConfig(vocab_size=len(WORDS)).save_pretrained(tmp_path)
    _save_tokenizer(tmp_path)
    processor = load_text_processor(str(tmp_path))
    assert processor.apply_chat_template(
        [{"role": "user", "content": "hello"}], tokenize=False
    ).startswith("user hello")
    assert "tokenizer alone" not in caplog.text


def test_no_tokenizer_raises_the_tokenizer_error(tmp_path):
    Kimi_K25Config().save_pretrained(tmp_path)
    with pytest.raises((OSError, ValueError), match="tokenizer") as raised:
        load_text_processor(str(tmp_path))
    assert "image processor" in "\n".join(raised.value.__notes__)


class _HidePackage(importlib.abc.MetaPathFinder):
    """Makes ``package`` (and its submodules) unimportable, as if not installed."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == self.package:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.mark.parametrize(
    ("package", "trust_remote_code"),
    [("tiktoken", True), ("tiktoken", False), ("sentencepiece", True)],
)
def test_missing_tokenizer_package_is_named(
    tmp_path, monkeypatch, package, trust_remote_code
):
    # Kimi-K2.5's tokenizer is tiktoken-based remote code (without trust,
    # transformers converts its tiktoken file, which needs tiktoken too); without
    # the package the processor's "Can't load image processor" must not be what
    # the user sees. The sentencepiece case: a remote tokenizer importing it.
    kimi = write_kimi_tokenizer(tmp_path / "kimi")
    if package == "sentencepiece":
        code = kimi / "tokenization_kimi.py"
        code.write_text("import sentencepiece\n" + code.read_text())
    for name in [m for m in sys.modules if m.split(".")[0] == package]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_HidePackage(package), *sys.meta_path])
    with pytest.raises((ImportError, ValueError, OSError)) as raised:
        load_text_processor(str(kimi), trust_remote_code=trust_remote_code)
    # The raised exception's own message (the processor's error is only a note).
    assert package in str(raised.value)
    assert "image processor" not in str(raised.value)
