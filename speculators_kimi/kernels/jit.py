"""Triton set-up shared by the draft-attention kernels: JIT, interpreter, launches.

- ``interpreting()``: the one answer to "do kernels run in the Triton interpreter",
  which is Triton's own (``speculators.train.device.triton_interpreter_enabled``).
- ``lazy_jit``: kernels are decorated with ``triton.jit`` at their first launch, so
  ``TRITON_INTERPRET=1`` may be set after triton (or this package) was imported.
- Under the interpreter, the compiled ``triton.jit`` helpers a kernel calls (ours in
  ``tiles.py``, triton's ``tl.sum``, ``tl.max``, ...) are swapped for interpreted
  ones for the launch, as triton itself does when the variable is set before its
  import.
- ``recording_launches``: record launches instead of running them, for compiling
  the exact launches for a GPU on a machine without one (``cross_compile``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
import triton
import triton.language as tl
from speculators.train.device import triton_interpreter_enabled as interpreting
from triton.runtime.jit import JITFunction

__all__ = [
    "LOG2E",
    "RecordedLaunch",
    "compute_dtype",
    "dot_precision",
    "interpreting",
    "lazy_jit",
    "recording_launches",
    "row_strides",
]

LOG2E = 1.4426950408889634

_JIT_CACHE: dict[tuple[Callable[..., Any], bool], Any] = {}
_INTERPRETED: dict[int, Any] = {}


def _compiled_helpers(fn: Callable[..., Any]) -> list[tuple[dict[str, Any], str, Any]]:
    """Every compiled ``JITFunction`` ``fn`` can reach by name: in its globals, in
    the globals of those helpers, and in ``triton.language`` (whose helpers triton
    decorated at *its* import)."""
    namespaces = [vars(mod) for mod in (tl, tl.standard, tl.core, tl.math)]
    pending = [fn.__globals__]
    seen: set[int] = set()
    while pending:
        namespace = pending.pop()
        if id(namespace) in seen:
            continue
        seen.add(id(namespace))
        namespaces.append(namespace)
        pending.extend(
            value.fn.__globals__
            for value in list(namespace.values())
            if isinstance(value, JITFunction)
        )
    return [
        (namespace, name, value)
        for namespace in {id(ns): ns for ns in namespaces}.values()
        for name, value in list(namespace.items())
        if isinstance(value, JITFunction)
    ]


@contextlib.contextmanager
def _interpretable_helpers(fn: Callable[..., Any]) -> Iterator[None]:
    """While ``fn`` runs in the interpreter, its compiled helpers are interpreted."""
    from triton.runtime.interpreter import InterpretedFunction

    swapped = _compiled_helpers(fn)
    for namespace, name, value in swapped:
        interpreted = _INTERPRETED.get(id(value))
        if interpreted is None:
            interpreted = InterpretedFunction(value.fn)
            _INTERPRETED[id(value)] = interpreted
        namespace[name] = interpreted
    try:
        yield
    finally:
        for namespace, name, value in swapped:
            namespace[name] = value


class _Launcher:
    def __init__(self, fn: Callable[..., Any], kernel: Any, interpret: bool):
        self.fn = fn
        self.kernel = kernel
        self.interpret = interpret

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        launch = self.kernel[grid]
        if not self.interpret:
            return launch  # type: ignore[no-any-return]

        def run(*args: Any, **kwargs: Any) -> Any:
            with _interpretable_helpers(self.fn):
                return launch(*args, **kwargs)

        return run


@dataclasses.dataclass(frozen=True)
class RecordedLaunch:
    """One kernel launch as a launcher issued it: the undecorated kernel function,
    the grid, the positional arguments and the keyword (constexpr and launch
    option) arguments."""

    fn: Callable[..., Any]
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


_RECORDING: list[RecordedLaunch] | None = None


@contextlib.contextmanager
def recording_launches() -> Iterator[list[RecordedLaunch]]:
    """Record launches instead of running them (call ``run_forward`` /
    ``run_backward`` on ``meta`` tensors inside this context)."""
    global _RECORDING
    previous, _RECORDING = _RECORDING, []
    try:
        yield _RECORDING
    finally:
        _RECORDING = previous


class _Recorder:
    def __init__(self, fn: Callable[..., Any], sink: list[RecordedLaunch]):
        self.fn = fn
        self.sink = sink

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.sink.append(RecordedLaunch(self.fn, tuple(grid), args, kwargs))

        return record


def lazy_jit(fn: Callable[..., Any]) -> Callable[[], Any]:
    """Decorate ``fn`` with ``triton.jit`` at first launch, not at import.

    ``triton.jit`` decides between compiler and interpreter when it decorates, so
    decorating lazily lets ``TRITON_INTERPRET=1`` be set after this module (or
    triton) was imported, e.g. by a test conftest in a larger pytest run.
    """

    def get() -> Any:
        if _RECORDING is not None:
            return _Recorder(fn, _RECORDING)
        interpret = interpreting()
        key = (fn, interpret)
        kernel = _JIT_CACHE.get(key)
        if kernel is None:
            kernel = triton.jit(fn)
            _JIT_CACHE[key] = kernel
        return _Launcher(fn, kernel, interpret)

    return get


def row_strides(*tensors: torch.Tensor) -> list[tuple[int, int, int]]:
    """The (batch, head, row) strides of each ``[B, H, L, d]`` tensor, one tuple
    per tensor, in order: what every kernel takes after its pointers (the head dim
    has stride 1)."""
    return [(t.stride(0), t.stride(1), t.stride(2)) for t in tensors]


def compute_dtype(dtype: torch.dtype) -> Any:
    """Triton dtype of the matmul operands: the input dtype; fp32 for bf16 under
    the interpreter (which cannot do bf16 arithmetic)."""
    if dtype == torch.float32:
        return tl.float32
    if dtype == torch.float16:
        return tl.float16
    if dtype == torch.bfloat16:
        return tl.float32 if interpreting() else tl.bfloat16
    raise TypeError(f"draft_attention supports fp32/fp16/bf16, got {dtype}")


def dot_precision(dtype: torch.dtype) -> str | None:
    """fp32 inputs use exact (IEEE) matmuls, not TF32; others the target default."""
    return "ieee" if dtype == torch.float32 else None
