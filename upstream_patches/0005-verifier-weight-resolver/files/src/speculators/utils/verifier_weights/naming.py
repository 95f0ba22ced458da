"""How verifier checkpoints name their embedding, output head and final norm.

Names are matched as whole dotted components of a weight-map key, most common
first; the resolver picks among them by position and shape, never by suffix.
"""

__all__ = [
    "EMBED_NAMES",
    "FLOAT_DTYPES",
    "HEAD_NAMES",
    "LAYER_CONTAINERS",
    "NORM_NAMES",
    "OVERRIDE_HINT",
    "PACKED_SUFFIXES",
]

EMBED_NAMES: tuple[str, ...] = (
    "embed_tokens",
    "tok_embeddings",
    "word_embeddings",
    "wte",
    "embed_in",
    "embeddings",
    "embed",
)
HEAD_NAMES: tuple[str, ...] = (
    "lm_head",
    "output",
    "embed_out",
    "output_layer",
    "unembed",
)
NORM_NAMES: tuple[str, ...] = (
    "norm",
    "final_layernorm",
    "final_layer_norm",
    "norm_f",
    "ln_f",
)
#: Module names that hold the decoder layers as ``<container>.<index>``.
LAYER_CONTAINERS: tuple[str, ...] = ("layers", "h", "blocks")
#: Sibling tensor suffixes that mean "this weight is stored quantized / packed".
PACKED_SUFFIXES: tuple[str, ...] = (
    "weight_packed",
    "qweight",
    "weight_q",
    "weight_int4",
    "packed_weight",
)
#: Safetensors dtypes that are read as they are.
FLOAT_DTYPES: frozenset[str] = frozenset({"F16", "BF16", "F32", "F64"})

OVERRIDE_HINT = (
    "Choose with --verifier-weight-prefix <prefix> (train config: "
    "verifier.verifier_weight_prefix) or name the tensors with "
    "--verifier-embed-key / --verifier-head-key / --verifier-norm-key."
)
