"""Hidden states for upstream's offline EAGLE-3 trainer, computed with transformers.

``speculators-kimi generate-hidden-states --verifier V --data-path D`` reads the
dataset directory written by upstream's ``speculators prepare-data`` (``input_ids``,
``loss_mask``, ``seq_len``), runs the verifier's **text** decoder on CPU or one GPU,
and writes ``D/hidden_states/hs_<i>.safetensors`` with ``hidden_states``
``[seq, n_aux + 1, hidden]`` and ``token_ids`` ``[seq]``: the layout upstream's
trainer reads (``--data-path D``, ``--on-missing raise``).

Conventions (vLLM's): the entry for aux layer id ``i`` is the residual stream
entering decoder layer ``i`` (``i == num_layers``: the output of the last layer);
the last entry is the final hidden state *before* the final norm, so
``lm_head(norm(last))`` is the verifier's own logits.

The modules, one job each:

* :mod:`.verifier`: which decoder to load. The decoder prefix comes from the same
  resolver training uses (``speculators.utils.verifier_weights``), so hidden
  states and training never disagree about which decoder is the verifier.
* :mod:`.capture`: the aux-layer capture (forward pre-hooks, vLLM's layout).
* :mod:`.plan`: aux layer ids, length-sorted batches, the context check.
* :mod:`.store`: the on-disk format and what counts as a finished file (resume).
* :mod:`.generate`: the loop that ties them together.
* :mod:`.cli`: the ``generate-hidden-states`` command.
"""

from __future__ import annotations

from .capture import capture_hidden_states
from .cli import main
from .generate import GenerationResult, generate_hidden_states
from .plan import (
    ContextLengthError,
    default_target_layer_ids,
    plan_batches,
)
from .store import HS_DIRNAME
from .verifier import load_text_verifier

__all__ = [
    "HS_DIRNAME",
    "ContextLengthError",
    "GenerationResult",
    "capture_hidden_states",
    "default_target_layer_ids",
    "generate_hidden_states",
    "load_text_verifier",
    "main",
    "plan_batches",
]
