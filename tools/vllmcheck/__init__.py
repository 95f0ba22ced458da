"""`tools/vllm_check.py`, split by job.

* :mod:`.env`: the scratch environment (vLLM's wheel on this interpreter's
  site-packages) the checks run in.
* :mod:`.stubs`: stand-ins for vLLM's CUDA-only ops (paged ``Attention``,
  ``MLAAttention``) and a one-process distributed group.
* :mod:`.draft`: building vLLM's draft class, loading an export into it, one step.
* :mod:`.speculators_layout`: the check of a speculators-format export.
* :mod:`.native_mla`: the check of a native MLA export (``Eagle3DeepseekV3``).
"""
