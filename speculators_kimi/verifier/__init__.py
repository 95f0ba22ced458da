"""The verifier, loaded once for every command that runs it: hidden-state
generation, reply regeneration and evaluation.

* :mod:`.resolved`: the verifier resolved once per command (local directory,
  shards checked, text config, decoder prefix), handed to the loader.
* :mod:`.loading`: which decoder to load (found by the resolver ``speculators
  train`` uses, so no command can pick another decoder than training), on one
  device or spread with accelerate.
* :mod:`.capture`: the aux-layer hidden states, in vLLM's layout (pre-hooks).
* :mod:`.causal`: the decoder plus its full output head over a KV cache: logits
  and aux states per forward.
* :mod:`.cache`: the verifier's cache while decoding, and taking it back to the
  accepted tokens (a hybrid's recurrent layers restored and the tokens re-run).
* :mod:`.greedy`: the verifier's own greedy decoding of a batch of prompts.
* :mod:`.shards`: every shard of the weight map there and whole (doctor's check,
  made before loading).
"""

from __future__ import annotations

from .capture import AuxCapture, capture_hidden_states
from .causal import CausalVerifier, load_causal_verifier
from .loading import DTYPES, Placement, load_decoder, load_text_verifier
from .resolved import ResolvedVerifier, resolve_verifier

__all__ = [
    "DTYPES",
    "AuxCapture",
    "CausalVerifier",
    "Placement",
    "ResolvedVerifier",
    "capture_hidden_states",
    "load_causal_verifier",
    "load_decoder",
    "load_text_verifier",
    "resolve_verifier",
]
