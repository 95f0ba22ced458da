"""Acceptance length of a draft with ``transformers`` (CPU or one GPU): EAGLE-3,
and the block drafters DFlash, DFlash2, DSpark and XPress.

``speculators-kimi evaluate --draft CKPT --verifier V --data D`` runs speculative
decoding as vLLM does it and reports what users judge a draft by: tokens per
verifier forward, per-position acceptance, and (greedy) whether the output equals
the verifier's own.

The modules, one job each (the verifier's decoder and head, with its aux states
per forward, come from :mod:`speculators_kimi.verifier`, which
``generate-hidden-states`` shares):

* :mod:`.draft`: an EAGLE-3 draft run step by step over its KV cache.
* :mod:`.block_draft`: a block drafter proposing one block per round.
* :mod:`.algorithms`: which drafts are decoded, and the strategy for each.
* :mod:`.vocab`: a draft's vocabulary in the verifier's; the token it proposes.
* :mod:`.decode`: one prompt's speculative (and plain greedy) decoding, with the
  draft's strategy proposing.
* :mod:`.prompts`: prompts from a prepared dataset or a conversations JSONL.
* :mod:`.report`: decoding over all prompts, the numbers.
* :mod:`.profile`: per-position acceptance (marginal and conditional) with the
  per-request rows behind it (``--profile``).
* :mod:`.context`: acceptance by context length; the lengths a draft was trained
  for, and the warning past them.
* :mod:`.epochs`: every epoch of a run measured, the best picked (``--each-epoch``).
* :mod:`.session`: a draft and its verifier loaded and checked together.
* :mod:`.text`: the reports as text.
* :mod:`.options`: the command's flags, typed, read once.
* :mod:`.cli`: the ``evaluate`` command.
"""

from __future__ import annotations

from .block_draft import BlockDraftRunner
from .context import acceptance_by_context, draft_lengths, length_warnings
from .draft import DraftRunner, untrained_copy
from .epochs import epoch_table
from .profile import RequestRecord, build_profile, check_profile
from .prompts import Prompt, dataset_prompts, jsonl_prompts
from .report import EvaluationReport, evaluate_draft
from .session import EvaluationSession, load_draft, load_session

__all__ = [
    "BlockDraftRunner",
    "DraftRunner",
    "EvaluationReport",
    "EvaluationSession",
    "Prompt",
    "RequestRecord",
    "acceptance_by_context",
    "build_profile",
    "check_profile",
    "dataset_prompts",
    "draft_lengths",
    "epoch_table",
    "evaluate_draft",
    "jsonl_prompts",
    "length_warnings",
    "load_draft",
    "load_session",
    "untrained_copy",
]
