"""Load the verifier's processor for text-only data preparation."""

from typing import Any

from transformers import AutoProcessor, AutoTokenizer

from speculators.data_generation.logging_utils import PipelineLogger

__all__ = ["load_text_processor"]

log = PipelineLogger(__name__)


def load_text_processor(target_model_path: str, *, trust_remote_code: bool = False):
    """Load the verifier's processor, or its tokenizer when that is all that loads.

    Speculator data is text: only the tokenizer and its chat template are used. For
    multimodal verifiers (Kimi-K2.5, Gemma-3, Qwen-VL, ...) ``AutoProcessor`` also
    builds the image/video processors, which fail when their optional dependencies
    (e.g. torchvision) or files (``preprocessor_config.json``) are absent. In that
    case the tokenizer alone is returned, with a warning naming the cause.

    :param target_model_path: Local path or Hub id of the verifier.
    :param trust_remote_code: Whether the verifier's own code may be executed.
    :return: The processor, or the tokenizer when the processor cannot be built.
    :raises Exception: The tokenizer's error, when the tokenizer cannot be loaded
        either. It names the cause (a missing ``tiktoken`` or ``sentencepiece``,
        remote code not trusted), which the processor's error may hide behind a
        missing image processor; the processor's error is noted on it.
    """
    try:
        return AutoProcessor.from_pretrained(
            target_model_path, trust_remote_code=trust_remote_code
        )
    except (OSError, ImportError, ValueError) as processor_error:
        try:
            tokenizer: Any = AutoTokenizer.from_pretrained(
                target_model_path, trust_remote_code=trust_remote_code
            )
        except (OSError, ImportError, ValueError) as tokenizer_error:
            tokenizer_error.add_note(
                f"Loading the processor of {target_model_path} failed first: "
                f"{type(processor_error).__name__}: {processor_error}"
            )
            raise tokenizer_error from None
        log.warning(
            f"Could not build the processor of {target_model_path} "
            f"({type(processor_error).__name__}: {processor_error}); "
            "using its tokenizer alone, which is all text-only data needs."
        )
        return tokenizer
