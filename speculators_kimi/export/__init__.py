"""``speculators-kimi export``: a trained checkpoint as vLLM serves it.

``speculators train`` writes a checkpoint that records the verifier by the path
it was trained from and carries the frozen verifier embedding. vLLM 0.33 reads
the speculators format itself, but ``vllm serve DIR`` needs the verifier as a
Hub id (it refuses local paths), reads ``head_dim`` as hidden/heads when it is
absent, and shares the target's embedding when the draft has none. The export
writes a new directory; the checkpoint stays as upstream wrote it:

* ``speculators_config.verifier.name_or_path``: a Hub id (``--verifier-id``, else
  the recorded one if it is an id, else the verifier's own ``_name_or_path`` or
  the Hugging Face cache it sits in);
* ``transformer_layer_config.head_dim``, ``draft_vocab_size``,
  ``target_hidden_size`` and ``eagle_aux_hidden_state_layer_ids`` written out;
* ``embed_tokens.weight`` dropped when it equals the verifier's (always so when
  training froze it), ``t2d`` dropped (vLLM does not read it), ``d2t`` kept.

A draft with DeepSeek-V3 (MLA) layers (``transformer_layer_config.model_type``
``deepseek_v3``, ``speculators train --draft-arch deepseek_v3``) is written in the
native Hugging Face layout instead: vLLM 0.33's speculators parser maps only
llama/qwen3 layers, while its ``Eagle3DeepseekV3ForCausalLM`` loads a plain
DeepSeek MLA ``config.json`` (:func:`.serving_config.mla_serving_config`,
``model_type`` ``deepseek_v2``) passed as ``--speculative-config '{"model": DIR,
"method": "eagle3"}'``; the tensors keep their names and the same tensors are
dropped. vLLM cannot detect such a directory as a draft by itself, so ``vllm
serve DIR`` is not a way to serve it.

A block drafter (``dflash``, ``dflash2``, ``dspark``) stays in the speculators
format, with what vLLM 0.34 would read otherwise than training wrote it settled
(each layer's causality inside the block, DSpark's head flags) and what it cannot
serve refused (:mod:`.block`). An MLA DSpark and an XPress draft are written in
vLLM's native layouts (:mod:`.k3_dspark`, :mod:`.xpress`); P-EAGLE checkpoints
are refused with vLLM's reason.

The modules, one job each:

* :mod:`.errors`: :class:`ExportError`, the export's one error.
* :mod:`.hub`: the verifier's Hugging Face Hub id (given, recorded, or found).
* :mod:`.serving_config`: the ``config.json`` of each layout (speculators format,
  native MLA) and the checkpoint files each carries over.
* :mod:`.block`: the block drafters' config (causality, explicit defaults) and
  the algorithms vLLM refuses.
* :mod:`.k3_dspark`, :mod:`.xpress`: vLLM's native layouts of an MLA DSpark and
  of an XPress draft (config, tensor names, what vLLM refuses).
* :mod:`.weights`: which tensors are served and which are dropped, and why.
* :mod:`.write`: the output directory checked, written beside it and renamed
  into place.
* :mod:`.draft`: :func:`export_draft`, the steps in order, and its result.
* :mod:`.launch`: the vLLM command lines that serve an export.
* :mod:`.cli`: the ``export`` command.
"""

from __future__ import annotations

from .cli import add_arguments, run
from .draft import ExportResult, export_draft
from .errors import ExportError
from .hub import hub_id_of
from .launch import launch_commands
from .serving_config import MLA_ARCHITECTURE, MLA_LAYER_TYPE, MLA_SERVE_MODEL_TYPE

__all__ = [
    "MLA_ARCHITECTURE",
    "MLA_LAYER_TYPE",
    "MLA_SERVE_MODEL_TYPE",
    "ExportError",
    "ExportResult",
    "add_arguments",
    "export_draft",
    "hub_id_of",
    "launch_commands",
    "run",
]
