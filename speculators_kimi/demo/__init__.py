"""End-to-end EAGLE-3 demo on an embedded tiny Kimi-K2.5-shaped verifier (CPU ok).

``speculators-kimi demo [--out DIR]`` runs, offline:

1. ``verifier``: builds a tiny random-weight Kimi-K2.5-shaped checkpoint (nested
   ``kimi_k25`` config, DeepSeek-V3 MLA + MoE text model under ``language_model.``,
   a vision tower that is ignored, a tokenizer with a chat template);
2. ``replies``: the verifier rewrites the shipped conversations' assistant
   replies (greedy), so the draft trains on what the verifier generates;
3. ``data``: upstream's ``speculators prepare-data --render-endpoint local``
   renders them with the chat template (loss on assistant turns);
4. ``hidden-states``: our ``generate-hidden-states`` (transformers, text model);
5. ``train``: upstream's ``speculators train`` (EAGLE-3, 3 TTT steps);
6. ``acceptance``: ``speculators-kimi evaluate``'s speculative decoding on the
   held-out prompts, for the trained draft and the same draft untrained;
7. reloads the draft with ``speculators.SpeculatorModel.from_pretrained`` and
   prints a report.

The stages run through :class:`~speculators_kimi.stage_cache.StageCache`: a
rerun reuses each stage whose inputs are unchanged and redoes one whose inputs
changed, with every stage after it; ``--fresh`` starts over. An interrupted
stage run again with unchanged inputs continues where it stopped (training
resumes from its last checkpoint).

The modules, one job each:

* :mod:`.settings`: :class:`DemoSettings` and the shipped conversations.
* :mod:`.stages`: the six stages, plain functions of a :class:`DemoContext`
  (paths, settings, conversations), and the ``speculators train`` arguments
  (built by :mod:`speculators_kimi.tiny_verifier.train`).
* :mod:`.stream`: the trainer's subprocess, its milestones shown live.
* :mod:`.pipeline`: :func:`run_demo`, the stages through the cache, the report.
* :mod:`.report`: the report as the text the command prints.
* :mod:`.cli`: the ``demo`` command (``python -m speculators_kimi.demo`` too).

Every module logs through ``logging.getLogger("speculators_kimi.demo")``: the
command prints its lines as ``[demo] ...``.
"""

from __future__ import annotations

from .cli import add_arguments, run
from .pipeline import run_demo
from .report import format_report
from .settings import DemoSettings, load_conversations
from .stages import train_argv

__all__ = [
    "DemoSettings",
    "add_arguments",
    "format_report",
    "load_conversations",
    "run",
    "run_demo",
    "train_argv",
]
