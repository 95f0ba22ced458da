"""Where the kernel tests run.

By default on CPU through the Triton interpreter (what CI and a GPU-less developer
have). ``SPECULATORS_KIMI_KERNEL_DEVICE=cuda`` runs the same tests on a GPU with
compiled kernels and GPU tile sizes, plus the ``gpu_only`` cases at real sizes.
"""

import os

import pytest
import torch

DEVICE = torch.device(os.environ.get("SPECULATORS_KIMI_KERNEL_DEVICE", "cpu"))
ON_GPU = DEVICE.type != "cpu"

interpreter_only = pytest.mark.skipif(
    ON_GPU, reason="exercises the Triton interpreter on CPU"
)
gpu_only = pytest.mark.skipif(
    not ON_GPU, reason="needs a GPU: SPECULATORS_KIMI_KERNEL_DEVICE=cuda"
)
