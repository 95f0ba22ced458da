"""The verifier layers whose hidden states an EAGLE-3 draft reads.

The trainer (:func:`speculators.models.utils.resolve_target_layer_ids`) and the
vLLM launcher that generates its hidden states (``speculators launch-vllm``) both
take their default layers and their validation from here, so the states vLLM
writes are the ones the draft is built to read.
"""

__all__ = ["check_target_layer_ids", "default_target_layer_ids"]


def default_target_layer_ids(num_hidden_layers: int) -> list[int]:
    """The default auxiliary layers: an early, the middle and a late one.

    :param num_hidden_layers: the verifier's decoder layer count (its text config's).
    :return: ``[2, num_hidden_layers // 2, num_hidden_layers - 3]``.
    """
    return [2, num_hidden_layers // 2, num_hidden_layers - 3]


def check_target_layer_ids(
    target_layer_ids: list[int], num_hidden_layers: int, *, explicit: bool
) -> None:
    """Reject layer ids a verifier of ``num_hidden_layers`` layers cannot serve.

    Id ``num_hidden_layers`` (the final hidden state) is valid: vLLM's hidden-state
    extraction accepts it, and the launcher appends it for the training targets.

    :param target_layer_ids: the layer ids to check.
    :param num_hidden_layers: the verifier's decoder layer count.
    :param explicit: whether the user gave the ids (else they are the defaults),
        which decides what the message asks for.
    :raises ValueError: if the ids are empty, repeated or outside
        ``[0, num_hidden_layers]``.
    """
    invalid = (
        not target_layer_ids
        or min(target_layer_ids) < 0
        or max(target_layer_ids) > num_hidden_layers
        or len(set(target_layer_ids)) != len(target_layer_ids)
    )
    if not invalid:
        return
    if explicit:
        raise ValueError(
            f"target_layer_ids must be distinct and within [0, {num_hidden_layers}] "
            f"for a verifier with {num_hidden_layers} hidden layers, "
            f"got {target_layer_ids}"
        )
    raise ValueError(
        f"Default target layer ids {target_layer_ids} are invalid for a verifier "
        f"with {num_hidden_layers} hidden layers; pass --target-layer-ids explicitly."
    )
