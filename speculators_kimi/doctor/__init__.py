"""`speculators-kimi doctor <verifier>`: check a verifier before training on it.

Reads only ``config.json``, the weight map and safetensors headers (no tensor
data unless ``--check-values``, no checkpoint code unless ``--trust-remote-code``)
and reports what training would use: the resolved text config and where it was
found, the decoder prefix and the exact embedding / head / final-norm keys with
shapes, dtypes and shards, whether the head is tied, any quantization, the
target layer ids, the draft config training would build (for
``--speculator-type`` and any train flags after ``--``), an estimate of training
memory, how vLLM 0.34 serves that draft, and every problem with its fix (a draft
``export`` would refuse among them). Exits non-zero when there is a problem.

``--check-values`` also reads the tensors the draft takes from the verifier (input
embedding, output head unless tied, final norm; a norm bias or FP8 head scale too),
one at a time in 16 MiB chunks read with ``safetensors``, and reports NaN/inf in any
of them as a problem (for a Hub id this downloads the shards that hold them, as
training would).

The logic lives in the patched ``speculators`` package (units 0003 and 0005-0009):
``speculators.utils.text_config`` and ``speculators.utils.verifier_weights``.

The modules, one job each:

* :mod:`.report`: :class:`Report` and :class:`Problem`, the report as text.
* :mod:`.checkpoint`: the text config, the weight keys and the shards.
* :mod:`.values`: NaN/inf in the tensors the draft reads (``--check-values``).
* :mod:`.draft`: the train config, the draft it would build, and its options.
* :mod:`.memory`: the draft's parameter counts and training-memory estimate.
* :mod:`.serving`: training's refusals before any work, and how vLLM serves
  the draft (``export``'s own plan).
* :mod:`.data`: the data a ``--data-path`` names, by training's own checks.
* :mod:`.diagnose`: every check in order, from :class:`DoctorOptions`.
* :mod:`.cli`: the ``doctor`` command (flags to :class:`DoctorOptions`).
"""

from __future__ import annotations

from .cli import add_arguments, run
from .diagnose import DoctorOptions, diagnose
from .draft import DraftChoices, draft_options
from .memory import draft_params, estimate_memory
from .report import Problem, Report, render
from .values import count_nonfinite

__all__ = [
    "DoctorOptions",
    "DraftChoices",
    "Problem",
    "Report",
    "add_arguments",
    "count_nonfinite",
    "diagnose",
    "draft_options",
    "draft_params",
    "estimate_memory",
    "render",
    "run",
]
