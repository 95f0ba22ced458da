"""Whether a trained draft fits a verifier: its width, vocabulary and depth.

Every command that pairs a draft with a verifier (``evaluate``, ``export``,
``vllm-check``) asks this one question, from the two ``config.json`` files.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CommandError

__all__ = ["DraftMismatchError", "check_draft_fits"]


class DraftMismatchError(CommandError):
    """The draft was trained for a verifier of another geometry."""


def check_draft_fits(checkpoint: str | Path, verifier: str | Path) -> None:
    """Fail before loading anything when the draft was trained for a verifier of
    another width, vocabulary or depth, naming both verifiers.

    Read from the two ``config.json`` files (no weights, no remote code), so
    the mismatch is reported as such, not as a tensor of the wrong shape.

    :raises DraftMismatchError: the geometries differ.
    """
    from speculators.utils.text_config import load_config_dict, text_config_dict

    draft = load_config_dict(checkpoint)
    layer = draft.get("transformer_layer_config") or {}
    text = text_config_dict(load_config_dict(verifier))
    trained_for = (draft.get("speculators_config") or {}).get("verifier") or {}
    wants = {
        "hidden size": draft.get("target_hidden_size") or layer.get("hidden_size"),
        "vocabulary": layer.get("vocab_size"),
    }
    has = {"hidden size": text.get("hidden_size"), "vocabulary": text.get("vocab_size")}
    problems = [
        f"{what} {wants[what]} (verifier's {has[what]})"
        for what in wants
        if None not in (wants[what], has[what]) and wants[what] != has[what]
    ]
    aux = (
        draft.get("eagle_aux_hidden_state_layer_ids")
        or draft.get("aux_hidden_state_layer_ids")
        or []
    )
    depth = text.get("num_hidden_layers")
    # id ``depth`` is the last layer's output (the final norm's input), as the
    # trainer, the launcher and the capture take it
    if depth is not None and aux and max(aux) > int(depth):
        problems.append(f"aux layers {aux} (the verifier has {depth} layers)")
    if problems:
        origin = trained_for.get("name_or_path") or "another verifier"
        raise DraftMismatchError(
            f"draft {checkpoint} was trained for {origin}, not for --verifier "
            f"{verifier}: " + "; ".join(problems) + ". Pass the verifier it was "
            "trained for, or a draft trained for this one."
        )
