"""Pluggable attention backends for draft models.

A draft attention backend is selected by name (``--draft-attn-impl``, stored as the
draft decoder config's ``_attn_implementation``). It owns everything that depends
on the attention implementation:

* how the attention mask is built from the packed sequence's document ids (and an
  optional sliding window), see :meth:`DraftAttentionBackend.build_mask`;
* how that mask grows by one block of keys per test-time-training (TTT) step, see
  :meth:`DraftAttentionBackend.extend_mask`;
* the transformers-style attention function the decoder layers call, registered in
  transformers' ``AttentionInterface`` under the backend's name;
* which devices it can train on, see :meth:`DraftAttentionBackend.supports_device`.

The built-in backends are ``simple_flex_attention``, ``sdpa`` and ``eager``. Other
packages add backends through the ``speculators.attention_backends`` entry point
group; each entry point is named after its backend and resolves to a
:class:`DraftAttentionBackend` subclass, e.g. in ``pyproject.toml``::

    [project.entry-points."speculators.attention_backends"]
    my_backend = "my_package.attention:MyBackend"

In-process backends register with ``@DraftAttentionBackend.register("name")``
(upstream's :class:`~speculators.utils.ClassRegistryMixin`). Entry points are
loaded lazily: on the first lookup of a name that is not already registered, or
when all available backends are listed.
"""

import warnings
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, ClassVar

import torch
from torch.nn.attention.flex_attention import create_block_mask, create_mask
from transformers.modeling_utils import AttentionInterface

from speculators.models.attention import create_float_mask, flex_attention_forward
from speculators.models.eagle3.attention import (
    create_combined_mask_mod,
    extend_dense_mask_for_draft_tokens,
    extend_mask_for_draft_tokens,
)
from speculators.utils import ClassRegistryMixin

__all__ = [
    "ENTRY_POINT_GROUP",
    "DraftAttentionBackend",
    "EagerBackend",
    "SdpaBackend",
    "SimpleFlexAttentionBackend",
    "available_backends",
    "cpu_backends",
    "get_backend",
]

#: Entry point group through which other distributions contribute backends.
ENTRY_POINT_GROUP = "speculators.attention_backends"


class DraftAttentionBackend(ClassRegistryMixin):
    """Base class for a named draft attention backend.

    Subclasses set :attr:`name`, implement :meth:`mask_from_mod` (or override
    :meth:`build_mask` when the backend does not work from ``mask_mod`` functions)
    and :meth:`extend_mask`, and either provide :attr:`attention_function` or name
    an attention implementation transformers already provides.

    The mask object is opaque to the model: whatever :meth:`build_mask` returns is
    passed to :meth:`extend_mask` and, as ``attention_mask``, to
    :attr:`attention_function`.
    """

    #: Registry name; also the ``_attn_implementation`` the draft layers dispatch on.
    name: ClassVar[str]
    #: Whether the backend can train (forward and backward) on CPU.
    supports_cpu: ClassVar[bool] = False
    #: Transformers-style attention function, called as
    #: ``fn(module, query, key, value, attention_mask, scaling=..., **kwargs)`` and
    #: returning ``(attn_output [B, N, H, d], attn_weights | None)``. ``None`` means
    #: transformers already provides an implementation under :attr:`name`.
    attention_function: ClassVar[Callable[..., Any] | None] = None

    def supports_device(self, device: torch.device | str) -> bool:
        """Whether the backend can train on ``device``.

        :param device: The device the draft model trains on.
        :return: ``True`` for accelerators, and for CPU when :attr:`supports_cpu`.
        """
        return torch.device(device).type != "cpu" or self.supports_cpu

    def mask_from_mod(
        self,
        mask_mod: Callable,
        q_len: int,
        kv_len: int,
        device: torch.device | str,
    ) -> Any:
        """Materialize a flex-attention style ``mask_mod`` into this backend's mask.

        :param mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool`` function.
        :param q_len: Number of query positions.
        :param kv_len: Number of key/value positions.
        :param device: Device the mask is created on.
        :return: The backend's mask object.
        :raises NotImplementedError: If the backend cannot express arbitrary masks.
        """
        raise NotImplementedError(
            f"Draft attention backend '{self.name}' does not support custom "
            "mask_mod functions."
        )

    def build_mask(
        self,
        document_ids: torch.Tensor,
        seq_len: int,
        device: torch.device | str,
        sliding_window: int | None = None,
    ) -> Any:
        """Build the first TTT step's mask for a packed sequence.

        A query attends causally to keys of its own document (within
        ``sliding_window`` when given) and always to itself; padding queries
        (document id ``-1``) attend only to themselves.

        :param document_ids: ``[seq_len]`` document id per position, ``-1`` for
            padding.
        :param seq_len: Number of positions in the packed sequence.
        :param device: Device the mask is created on.
        :param sliding_window: Optional sliding window size, in tokens.
        :return: The backend's mask object, covering ``seq_len`` keys.
        """
        mask_mod = create_combined_mask_mod(
            document_ids, seq_len, sliding_window=sliding_window
        )
        return self.mask_from_mod(mask_mod, seq_len, seq_len, device)

    def extend_mask(self, mask: Any, seq_len: int) -> Any:
        """Extend a mask for the next TTT step.

        Each TTT step appends ``seq_len`` keys (the draft tokens of the step just
        taken) of which query ``i`` attends only to the ``i``-th.

        :param mask: The mask used by the step just taken.
        :param seq_len: Number of positions in the packed sequence.
        :return: The mask for the next step.
        """
        raise NotImplementedError


@DraftAttentionBackend.register("simple_flex_attention")
class SimpleFlexAttentionBackend(DraftAttentionBackend):
    """``flex_attention`` with a ``BlockMask``; the default on accelerators."""

    name = "simple_flex_attention"
    # flex_attention has no CPU backward.
    supports_cpu = False
    attention_function = staticmethod(flex_attention_forward)

    def mask_from_mod(self, mask_mod, q_len, kv_len, device):
        return create_block_mask(
            mask_mod, B=None, H=None, Q_LEN=q_len, KV_LEN=kv_len, device=device
        )

    def extend_mask(self, mask, seq_len):  # noqa: ARG002
        return extend_mask_for_draft_tokens(mask)


@DraftAttentionBackend.register("sdpa")
class SdpaBackend(DraftAttentionBackend):
    """Transformers' ``sdpa`` attention with a dense boolean mask."""

    name = "sdpa"
    supports_cpu = True

    def mask_from_mod(self, mask_mod, q_len, kv_len, device):
        return create_mask(
            mask_mod, B=None, H=None, Q_LEN=q_len, KV_LEN=kv_len, device=device
        )

    def extend_mask(self, mask, seq_len):
        return extend_dense_mask_for_draft_tokens(mask, seq_len)


@DraftAttentionBackend.register("eager")
class EagerBackend(SdpaBackend):
    """Transformers' ``eager`` attention with a dense additive (0 / -inf) mask."""

    name = "eager"

    def mask_from_mod(self, mask_mod, q_len, kv_len, device):
        return create_float_mask(
            mask_mod, B=None, H=None, Q_LEN=q_len, KV_LEN=kv_len, device=device
        )


# Backend instances by name, made on first lookup (backends are stateless).
_INSTANCES: dict[str, DraftAttentionBackend] = {}
# Entry point names already tried, so a broken one warns once.
_TRIED_ENTRY_POINTS: set[str] = set()


def _registry() -> dict[str, type[Any]]:
    return DraftAttentionBackend.registry or {}


def _load_entry_point(entry_point: EntryPoint) -> None:
    """Load and register one entry point, warning (not raising) when it is broken."""
    _TRIED_ENTRY_POINTS.add(entry_point.name)
    if entry_point.name in _registry():
        warnings.warn(
            f"Ignoring entry point '{entry_point.name} = {entry_point.value}' in "
            f"group '{ENTRY_POINT_GROUP}': a draft attention backend named "
            f"'{entry_point.name}' is already registered.",
            stacklevel=3,
        )
        return
    try:
        loaded = entry_point.load()
        if not (isinstance(loaded, type) and issubclass(loaded, DraftAttentionBackend)):
            raise TypeError(
                f"resolves to {loaded!r}, not a DraftAttentionBackend subclass"
            )
        if loaded.name != entry_point.name:
            raise ValueError(
                f"the backend is named '{loaded.name}', not '{entry_point.name}'"
            )
        DraftAttentionBackend.register_decorator(loaded, name=entry_point.name)
    except Exception as exc:  # noqa: BLE001
        warnings.warn(
            f"Could not load draft attention backend entry point "
            f"'{entry_point.name} = {entry_point.value}' "
            f"(group '{ENTRY_POINT_GROUP}'): {exc}",
            stacklevel=3,
        )


def _load_entry_points(name: str | None = None) -> None:
    """Load the not yet tried entry points, all of them or only those named ``name``."""
    found = (
        entry_points(group=ENTRY_POINT_GROUP)
        if name is None
        else entry_points(group=ENTRY_POINT_GROUP, name=name)
    )
    for entry_point in sorted(found, key=lambda ep: ep.name):
        if entry_point.name not in _TRIED_ENTRY_POINTS:
            _load_entry_point(entry_point)


def available_backends() -> list[str]:
    """Names of all draft attention backends, including those from entry points.

    :return: The built-in backends, then the others sorted by name.
    """
    _load_entry_points()
    names = list(_registry())
    builtins = [name for name in names if name in _BUILTIN_NAMES]
    return builtins + sorted(name for name in names if name not in builtins)


def get_backend(name: str) -> DraftAttentionBackend:
    """Look up a draft attention backend by name.

    The backend's :attr:`~DraftAttentionBackend.attention_function`, if any, is
    registered in transformers' ``AttentionInterface`` under the same name.

    :param name: The backend's name, e.g. ``"sdpa"``.
    :return: The backend instance.
    :raises ValueError: If no backend of that name is registered or installed.
    """
    if name not in _registry():
        _load_entry_points(name)
    backend_class = _registry().get(name)
    if backend_class is None:
        raise ValueError(
            f"Unknown draft attention backend '{name}'. Available: "
            f"{', '.join(available_backends())}."
        )
    backend = _INSTANCES.get(name)
    if not isinstance(backend, backend_class):
        backend = backend_class()
        _INSTANCES[name] = backend
    if backend.attention_function is not None:
        AttentionInterface.register(name, backend.attention_function)
    return backend


def cpu_backends() -> list[str]:
    """Names of the available backends that can train on CPU.

    :return: Backend names, in :func:`available_backends` order.
    """
    return [
        name
        for name in available_backends()
        if get_backend(name).supports_device("cpu")
    ]


_BUILTIN_NAMES = frozenset(_registry())
