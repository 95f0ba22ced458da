"""Find and load the verifier's input embedding, output head and final norm.

The draft reuses three tensors of the verifier's text model. The modules by job:

* :mod:`.naming`: the naming families matched on dot boundaries;
* :mod:`.files`: the weight map and tensor metadata, local or on the Hub;
* :mod:`.prefix`: which module path is the text decoder;
* :mod:`.resolver`: the exact keys (:func:`resolve_verifier_weights`).
"""

from speculators.utils.verifier_weights.files import (
    read_shard_metadata,
    read_weight_index,
    resolve_checkpoint_file,
)
from speculators.utils.verifier_weights.naming import (
    EMBED_NAMES,
    HEAD_NAMES,
    NORM_NAMES,
)
from speculators.utils.verifier_weights.resolver import resolve_verifier_weights
from speculators.utils.verifier_weights.spec import (
    TensorInfo,
    VerifierWeightsError,
    VerifierWeightSpec,
)

__all__ = [
    "EMBED_NAMES",
    "HEAD_NAMES",
    "NORM_NAMES",
    "TensorInfo",
    "VerifierWeightSpec",
    "VerifierWeightsError",
    "read_shard_metadata",
    "read_weight_index",
    "resolve_checkpoint_file",
    "resolve_verifier_weights",
]
