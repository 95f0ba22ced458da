"""Which verifier architectures vLLM 0.34 cannot take aux hidden states from.

EAGLE-3 and the block drafters read the verifier's hidden states at their aux
layers. vLLM 0.34 takes them only from a model class that implements
``SupportsEagle3``: else its engine stops at start-up ("Model does not support
EAGLE3 interface"), for serving a draft and for ``extract_hidden_states``
(``launch-vllm``) alike. An architecture vLLM does not register runs on its
Transformers backend, which implements it, where transformers has the model and
that backend can run it; ``--model-impl transformers`` picks that backend for a
registered one.

The list is every architecture vLLM 0.34.0 registers (text and multimodal
generation) to a class without it: vLLM's own ``supports_eagle3`` where the class
imports on CPU, its source otherwise (``tests/support/vllm_eagle3_scan.py``);
``tests/export/test_served_verifiers.py`` checks it against the wheel.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The vLLM release the list describes: vllm-check's default, which the test reads.
from .vllm_check.env import VLLM_VERSION

__all__ = ["VLLM_VERSION", "WITHOUT_EAGLE3", "aux_states_note"]

#: Architectures vLLM registers to a class that does not implement SupportsEagle3.
WITHOUT_EAGLE3 = frozenset(
    {
        "AXK1ForCausalLM",
        "AliceAIForCausalLM",
        "AudioFlamingo3ForConditionalGeneration",
        "BagelForConditionalGeneration",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "BeeForConditionalGeneration",
        "Blip2ForConditionalGeneration",
        "BloomForCausalLM",
        "CanaryForConditionalGeneration",
        "ChatGLMForConditionalGeneration",
        "ChatGLMModel",
        "Cohere2ForCausalLM",
        "Cohere2VisionForConditionalGeneration",
        "CohereAsrForConditionalGeneration",
        "CohereForCausalLM",
        "Cosmos3EdgeForConditionalGeneration",
        "DbrxForCausalLM",
        "DeciLMForCausalLM",
        "DeepseekOCR2ForCausalLM",
        "DeepseekOCRForCausalLM",
        "DeepseekVLV2ForCausalLM",
        "DiffusionGemmaForBlockDiffusion",
        "DomynEdgeForCausalLM",
        "DoryForCausalLM",
        "Dots3NoteForCausalLM",
        "DotsOCRForCausalLM",
        "Eagle2_5_VLForConditionalGeneration",
        "Ernie4_5_MoeForCausalLM",
        "Ernie4_5_VLMoeForConditionalGeneration",
        "Exaone4ForCausalLM",
        "ExaoneForCausalLM",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeForCausalLM",
        "FalconForCausalLM",
        "FalconH1ForCausalLM",
        "FalconMambaForCausalLM",
        "FireRedASR2ForConditionalGeneration",
        "FlintForCausalLM",
        "FunASRForConditionalGeneration",
        "FunAudioChatForConditionalGeneration",
        "GLM4VForCausalLM",
        "GPT2LMHeadModel",
        "GPTJForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForCausalLM",
        "Gemma3nForConditionalGeneration",
        "Glm4ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "GlmAsrForConditionalGeneration",
        "GlmOcrForConditionalGeneration",
        "Granite4VisionForConditionalGeneration",
        "GraniteMoeHybridForCausalLM",
        "GraniteSpeechForConditionalGeneration",
        "GraniteSpeechPlusForConditionalGeneration",
        "H2OVLChatModel",
        "HCXVisionV2ForCausalLM",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
        "HfMoondream",
        "HrmTextForCausalLM",
        "HyperCLOVAXForCausalLM",
        "IQuestLoopCoderForCausalLM",
        "Idefics3ForConditionalGeneration",
        "InklingForCausalLM",
        "InklingForConditionalGeneration",
        "InternLM2ForCausalLM",
        "InternS1ForConditionalGeneration",
        "InternVLChatModel",
        "InternVLForConditionalGeneration",
        "IsaacForConditionalGeneration",
        "JambaForCausalLM",
        "KananaVForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "Lfm2VlForConditionalGeneration",
        "Lfm3AudioForConditionalGeneration",
        "Lfm3ForCausalLM",
        "Lfm3VlForConditionalGeneration",
        "Llama_Nemotron_Nano_VL",
        "LlavaNextForConditionalGeneration",
        "LlavaNextVideoForConditionalGeneration",
        "LlavaOnevision2ForConditionalGeneration",
        "LlavaOnevisionForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "LongcatFlashNgramForCausalLM",
        "Mamba2ForCausalLM",
        "MambaForCausalLM",
        "MiDashengLMModel",
        "MingV3ASRForConditionalGeneration",
        "MiniCPMO",
        "MiniCPMV",
        "MixtralForCausalLM",
        "Molmo2ForConditionalGeneration",
        "MolmoForCausalLM",
        "Moondream3ForCausalLM",
        "MoonshotKimiaForCausalLM",
        "MossAudioModel",
        "MossTranscribeDiarizeForConditionalGeneration",
        "NVLM_D",
        "NemotronForCausalLM",
        "NemotronParseForConditionalGeneration",
        "OPTForCausalLM",
        "OlmoHybridForCausalLM",
        "OpenPanguVLForConditionalGeneration",
        "OpenVLAForActionPrediction",
        "OrionForCausalLM",
        "Ovis",
        "Ovis2_5",
        "Ovis2_6ForCausalLM",
        "Ovis2_6_MoeForCausalLM",
        "PaddleOCRVLForConditionalGeneration",
        "PaliGemmaForConditionalGeneration",
        "PanguEmbeddedForCausalLM",
        "PanguProMoEV2ForCausalLM",
        "PanguUltraMoEForCausalLM",
        "Param2MoEForCausalLM",
        "Phi3VForCausalLM",
        "Phi4ForCausalLMV",
        "Phi4MMForCausalLM",
        "PhiMoEForCausalLM",
        "QianfanOCRForConditionalGeneration",
        "Qwen2AudioForConditionalGeneration",
        "Qwen2MoeForCausalLM",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5OmniForConditionalGeneration",
        "Qwen2_5OmniModel",
        "Qwen4ExpForCausalLM",
        "RForConditionalGeneration",
        "Rnj1ForCausalLM",
        "SarvamMoEForCausalLM",
        "SkyworkR1VChatModel",
        "SmolVLMForConditionalGeneration",
        "SolarForCausalLM",
        "Step3TextForCausalLM",
        "Step3VLForConditionalGeneration",
        "Step3p5ForCausalLM",
        "Step3p7ForConditionalGeneration",
        "Step5ForCausalLM",
        "Step5ForConditionalGeneration",
        "StepVLForConditionalGeneration",
        "UltravoxModel",
        "UnlimitedOCRForCausalLM",
        "VoxtralForConditionalGeneration",
        "VoxtralRealtimeGeneration",
        "WhisperForConditionalGeneration",
        "Zamba2ForCausalLM",
        "ZayaForCausalLM",
    }
)


def aux_states_note(architectures: Sequence[str] | None) -> str | None:
    """Why vLLM 0.34 cannot take aux hidden states from a verifier whose
    config.json names ``architectures``, and what serves it; None when vLLM
    takes them (its own class, or its Transformers backend for an architecture
    it does not register) or the config names none. The first architecture
    decides: vLLM loads the first it registers, and a checkpoint names one."""
    found = next(iter(architectures or ()), None)
    if found not in WITHOUT_EAGLE3:
        return None
    return (
        f"vLLM {VLLM_VERSION}'s own {found} does not implement SupportsEagle3, so "
        "vLLM can neither serve an EAGLE-3 or block draft on it nor extract its "
        "hidden states (launch-vllm): it stops with 'Model does not support "
        "EAGLE3 interface'. Add --model-impl transformers to `vllm serve` (vLLM's "
        "Transformers backend implements it) if that backend runs this model."
    )
