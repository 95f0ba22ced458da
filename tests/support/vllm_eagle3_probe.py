"""Run by ``tests/export/test_served_verifiers.py`` in the scratch vLLM
environment: for every architecture vLLM registers for text generation (text and
multimodal), the module of the class its registry loads and whether vLLM's own
``supports_eagle3`` says yes (null: the class does not import here, e.g. it needs
``torchvision``), and where the ``vllm`` package lies. Prints one JSON object."""

from __future__ import annotations

import json
import logging
from pathlib import Path

logging.disable(logging.CRITICAL)

import vllm  # noqa: E402
from vllm.model_executor.models.interfaces import supports_eagle3  # noqa: E402
from vllm.model_executor.models.registry import (  # noqa: E402
    _MULTIMODAL_MODELS,
    _TEXT_GENERATION_MODELS,
    ModelRegistry,
)

report = {}
for arch in {**_TEXT_GENERATION_MODELS, **_MULTIMODAL_MODELS}:
    try:
        cls = ModelRegistry._try_load_model_cls(arch)
    except Exception:  # an import this environment cannot make
        cls = None
    report[arch] = (
        [cls.__module__, bool(supports_eagle3(cls))] if cls is not None else None
    )
print(json.dumps({"vllm": str(Path(vllm.__file__).parent), "architectures": report}))
