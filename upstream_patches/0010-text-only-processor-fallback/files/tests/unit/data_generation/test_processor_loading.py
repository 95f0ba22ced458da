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


def test_no_tokenizer_raises_the_processor_error(tmp_path):
    Kimi_K25Config().save_pretrained(tmp_path)
    with pytest.raises(OSError, match="image processor|tokenizer|Can't load"):
        load_text_processor(str(tmp_path))
