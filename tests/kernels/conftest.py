"""Kernel tests run the Triton interpreter on CPU.

``speculators_kimi.kernels`` decorates its kernels with ``triton.jit`` lazily at the
first launch and reads ``TRITON_INTERPRET`` then (and makes triton's own ``tl.sum``
etc. interpretable for its launches), so setting it here works even when other tests
imported torch, triton or the kernels package earlier in the same run.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"
