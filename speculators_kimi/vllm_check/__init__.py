"""``speculators-kimi vllm-check``: an exported draft (EAGLE-3; DFlash, DFlash2 and
DSpark in :mod:`.block_layout`; XPress in :mod:`.xpress`) checked with vLLM's own
code, on CPU, before it is deployed.

    speculators-kimi vllm-check EXPORT --checkpoint CKPT --verifier VERIFIER \
        [--vllm-version 0.34.0] [--env DIR] [--json OUT]

1. Builds (once) a scratch environment with the ``vllm`` wheel (0.34.0, or the
   release ``--vllm-version`` names: :data:`.env.VLLM_VERSIONS`) installed
   without its dependencies, reusing this interpreter's site-packages (torch,
   transformers, speculators), plus the few pure-Python modules vLLM imports at
   module level (``VLLM_DEPS``, pinned). Nothing of vLLM is installed here.
2. In that environment, with ``HF_HUB_OFFLINE=1``:
   - vLLM's speculators parser (``SpeculatorsConfig.from_pretrained``) reads the
     export, and ``maybe_override_with_speculators`` (what ``vllm serve DIR``
     does first) accepts it and names the verifier; the original checkpoint is
     run through it too (it is refused, the message recorded);
   - the draft class the parsed config names (``Eagle3LlamaForCausalLM``) is
     built with a one-process gloo group and loads the export's tensors through
     its own ``load_weights``; every parameter starts as NaN, so one that no
     tensor reached is found (the embedding, absent from the export, is shared
     from the verifier as vLLM's proposer shares it);
   - one draft step over a prompt (the verifier's real aux hidden states,
     computed by ``speculators_kimi.evaluate``; with ``--synthetic-aux-states``
     states drawn at the verifier's width, no verifier decoder built): vLLM's
     ``combine_hidden_states``, ``forward`` and ``compute_logits`` against our
     ``DraftRunner`` on the trained checkpoint. Sized for a real export on a CPU
     box: ours stays in its stored dtype (mapped from the file) until vLLM's
     class has been loaded (tensors streamed one at a time), stepped and
     released; only then is ours upcast to float32 and stepped. Both embed
     through the prompt's rows of the embedding alone (``PromptRows``).

Stubbed, because it has no CPU implementation in a CUDA wheel: only vLLM's paged
``Attention`` layer (its KV cache and CUDA kernels), replaced by causal
``scaled_dot_product_attention`` over the step's tokens, honouring the layer's
sliding window. vLLM's compiled custom ops (``vllm._C``) are absent; its layers
run their ``forward_native`` paths. ``torch.compile`` is off.

An MLA export (native layout, ``Eagle3DeepseekV3ForCausalLM``; no
``speculators_config``) goes the way ``vllm serve VERIFIER --speculative-config
'{"model": EXPORT, "method": "eagle3"}'`` takes it instead:

- vLLM's own ``ModelConfig`` for the target and ``SpeculativeConfig`` for the
  draft: the draft ``ModelConfig`` (with the draft ``hf_overrides`` vLLM composes),
  its ``EAGLEConfig`` wrapper and architecture update, then ``VllmConfig`` over
  both. The target is a text-only stand-in of the verifier when the verifier is
  multimodal (its ``text_config`` and tokenizer in a scratch directory: vLLM's
  multimodal Kimi-K2.5 config needs an image processor the tiny verifier lacks;
  the draft only reads the target's size, dtype and tokenizer). Recorded: the
  parsed fields, ``draft_model_config.use_mla`` (MLA KV cache), the resolved
  class; the same export relabelled ``deepseek_v3`` is run through it too
  (vLLM rewrites that into its MTP draft and refuses it, message recorded),
  and ``maybe_override_with_speculators`` on the export (``vllm serve EXPORT``:
  no speculative config, so that form cannot serve it);
- the class ``ModelRegistry`` resolves, built under that ``VllmConfig``,
  NaN-filled, loaded through its own ``load_weights``, and the one-step logits
  compared, as above.

Stubbed on that path, instead of ``Attention``: only vLLM's ``MLAAttention``
(``vllm.model_executor.layers.mla.MLAAttention``, the paged latent-cache attention
op inside ``MultiHeadLatentAttentionWrapper``; CUDA/ROCm backends only). The stub
computes what its prefill path computes, in plain PyTorch: ``k_nope, v`` from the
module's own ``kv_b_proj`` over ``kv_c_normed``, ``k = cat(k_nope, k_pe)`` with
``k_pe`` shared by every head, causal ``scaled_dot_product_attention`` with the
module's own softmax ``scale``, output ``[tokens, heads * v_head_dim]``. vLLM's
q/kv down-projections (fused ``fused_qkv_a_proj``), latent RMSNorms, ``q_b_proj``,
interleaved rotary embedding, ``o_proj``, MLP, norms, ``fc`` and ``lm_head`` run
as vLLM's code.

The modules, one job each:

* :mod:`.env`: the scratch environment (vLLM's wheel on this interpreter's
  site-packages) the checks run in.
* :mod:`.size`: whether the verifier's decoder fits this machine (else the check
  is refused, naming ``--synthetic-aux-states``), before anything is built.
* :mod:`.stubs`: stand-ins for vLLM's CUDA-only ops (paged ``Attention``,
  ``MLAAttention``) and a one-process distributed group.
* :mod:`.draft`: building vLLM's draft class, loading an export into it, one step.
* :mod:`.speculators_layout`: the check of a speculators-format export.
* :mod:`.native_mla`: the check of a native MLA export (``Eagle3DeepseekV3``).
* :mod:`.block_layout`: the check of a block drafter's export (dflash, dflash2,
  dspark: vLLM's ``DFlashQwen3``/``DFlash2Qwen3``/``Qwen3DSpark`` classes, one
  block step against upstream's training forward; its stand-ins are
  :data:`.stubs.BLOCK_STUBS`).
* :mod:`.k3_dspark`: the check of an MLA DSpark export (native ``k3_dspark``:
  vLLM's ``K3DSparkForCausalLM``, one block step; its stand-ins are
  :data:`.stubs.K3_STUBS`).
* :mod:`.xpress`: the check of an XPress export (native ``Qwen3XPressModel``:
  vLLM's ``Qwen3XPressForCausalLM``, one block step and one refine pass, then
  the block its own Jacobi kernels draft, run by :mod:`.xpress_kernels` under
  Triton's interpreter, against ``evaluate``'s).
* :mod:`.inner`: what runs in the scratch interpreter (one JSON report).
* :mod:`.cli`: the ``vllm-check`` command.
"""
