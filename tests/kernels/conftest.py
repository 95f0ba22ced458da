"""Kernel tests run the Triton interpreter on CPU, unless told to use a GPU.

``speculators_kimi.kernels`` decorates its kernels with ``triton.jit`` lazily at the
first launch and reads ``TRITON_INTERPRET`` then (and makes triton's own ``tl.sum``
etc. interpretable for its launches), so setting it here works even when other tests
imported torch, triton or the kernels package earlier in the same run. With
``SPECULATORS_KIMI_KERNEL_DEVICE=cuda`` (see kernel_device.py) the kernels compile
for the GPU instead.
"""

import os

import pytest
import torch
from kernel_device import DEVICE, ON_GPU

if ON_GPU:
    if DEVICE.type != "cuda" or not torch.cuda.is_available():
        raise pytest.UsageError(
            f"SPECULATORS_KIMI_KERNEL_DEVICE={DEVICE} but no CUDA device is available; "
            "unset it to run the kernels in the Triton interpreter on CPU."
        )
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = "1"
