import os
import re
import subprocess
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


# Run in a fresh interpreter with the package made unimportable, as if missing.
HIDE_PACKAGE = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {package!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
from speculators.data_generation.processor_loading import load_text_processor
load_text_processor({path!r}, trust_remote_code={trust})
"""


@pytest.mark.parametrize(
    ("package", "trust_remote_code"),
    [("tiktoken", True), ("tiktoken", False), ("sentencepiece", True)],
)
def test_missing_tokenizer_package_is_named(tmp_path, package, trust_remote_code):
    # Kimi-K2.5's tokenizer is tiktoken-based remote code (without trust,
    # transformers converts its tiktoken file, which needs tiktoken too); without
    # the package the processor's "Can't load image processor" must not be what
    # the user sees. The sentencepiece case: a remote tokenizer importing it.
    kimi = write_kimi_tokenizer(tmp_path / "kimi")
    if package == "sentencepiece":
        code = kimi / "tokenization_kimi.py"
        code.write_text("import sentencepiece\n" + code.read_text())
    script = HIDE_PACKAGE.format(
        package=package, path=str(kimi), trust=trust_remote_code
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode != 0
    # The raised exception's own line (its notes follow it).
    raised = [
        line
        for line in result.stderr.splitlines()
        if re.match(r"(ImportError|ValueError|OSError|ModuleNotFoundError): ", line)
    ]
    assert raised, result.stderr[-2000:]
    assert package in raised[-1]
    assert "image processor" not in raised[-1]
