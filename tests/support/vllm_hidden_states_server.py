"""A stand-in for a vLLM 0.34 server that extracts hidden states, for tests.

First written from vLLM 0.33's source; re-read against 0.34.0 on 2026-12-04.

It answers as ``speculators launch-vllm`` starts vLLM: ``vllm serve VERIFIER
--speculative-config '{"method": "extract_hidden_states", "num_speculative_tokens":
1, "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids":
[...]}}}' --kv-transfer-config '{"kv_connector": "ExampleHiddenStatesConnector",
"kv_role": "kv_producer", "kv_connector_extra_config": {"shared_storage_path":
DIR}}'``. The states are computed with a real ``transformers`` verifier (the
project's own capture, :func:`speculators_kimi.verifier.capture_hidden_states`);
everything else is written from vLLM 0.34.0's source (paths under ``vllm/``):

* ``POST /v1/completions`` (``entrypoints/openai/completion/serving.py``): the
  request id is ``cmpl-<X-Request-Id, else the body's request_id, else
  random_uuid()>`` (l. 192; ``entrypoints/serve/engine/serving.py`` l. 133-143,
  ``completion/protocol.py`` l. 147-154), the prompt's ``<id>-<i>`` (l. 228),
  made unique by the engine as ``<that>-<8 hex>`` (``v1/engine/input_processor.py``
  l. 359). The response is a ``CompletionResponse`` (``completion/protocol.py``
  l. 675-722) named as served (serving.py l. 270) whose choice carries
  ``prompt_token_ids``/``token_ids`` when ``return_token_ids`` is set (serving.py
  l. 708-718) and whose top-level ``kv_transfer_params`` is the first prompt's
  (serving.py l. 766-777). ``usage`` is a ``UsageInfo``
  (``entrypoints/serve/engine/protocol.py`` l. 135-142) with
  ``completion_tokens_details: null``; new in 0.34, its ``prompt_tokens_details``
  is left out when None (0.33 sent ``null``).
* ``ExampleHiddenStatesConnector``
  (``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``):
  the file is ``<shared_storage_path>/<request id>.safetensors`` (l. 497-517;
  ``shared_storage_path`` defaults to ``/tmp``, l. 179-181; a client's own
  ``kv_transfer_params["hidden_states_path"]`` is ignored unless
  ``allow_custom_save_path``, l. 226-228 and 506-515); its companion
  ``<file>.lock`` is created and held with ``LOCK_EX`` before the client gets
  the path (``wait_for_save``, l. 269-290, which the V2 runner calls after each
  forward: ``v1/worker/gpu/kv_connector.py`` l. 146-147, 165) and released by
  closing it once ``save_file`` has written ``{"hidden_states", "token_ids"}`` on
  a writer thread (l. 330-347, 416-419, 425-438); ``use_synchronization_lock:
  false`` writes no lock (l. 235-237, 431). ``token_ids`` are the prompt's (all
  tokens but the sampled one with ``include_output_tokens``), int64, l. 540-553
  (0.34 builds them with ``utils/torch_utils.py``'s ``token_ids_to_tensor``,
  l. 98-103, from the request's int32 ``TokenBuffer``: the same ids and dtype);
  the request's ``kv_transfer_params`` are ``{"hidden_states_path": file}``
  (l. 560).
* the layout: 0.34 has no V1 model runner, and 0.33's
  ``v1/spec_decode/extract_hidden_states.py`` (``ExtractHiddenStatesProposer``) is
  gone; the states come from the V2 runner's ``ExtractHiddenStatesSpeculator``
  (``v1/worker/gpu/spec_decode/extract_hidden_states.py``; configured by
  ``extract_hidden_states_config.py`` l. 23-44, 0.33's
  ``config/speculative.py`` branch). The runner sets the verifier's aux layers to
  ``eagle_aux_hidden_state_layer_ids`` (``v1/worker/gpu/model_runner.py``
  l. 425-429; ``spec_decode/eagle/eagle3_utils.py`` l. 15-30, 103-109), takes
  ``(hidden_states, aux_hidden_states)`` from the forward (model_runner.py
  l. 2169-2171) and hands them to ``propose`` (l. 2367-2373), which stacks them
  into its ``[num_tokens, len(eagle_aux_hidden_state_layer_ids), hidden_size]``
  buffer in the model's dtype (extract_hidden_states.py l. 48-56, 133-135;
  ``spec_decode/speculator.py`` l. 199) and runs ``ExtractHiddenStatesModel`` on
  it (l. 157): one cache-only attention layer with a head per state
  (``model_executor/models/extract_hidden_states.py``
  l. 346-357, 372) scatters it into the KV cache (l. 81-90), which the connector
  reads back per block (connector l. 37-46, 399-401). So ``hidden_states`` is
  ``[num_tokens, len(ids), hidden_size]``, one entry per extracted layer in layer
  order, as the model appends them (``model_executor/models/deepseek_v2.py``
  l. 1561-1568, 1586-1587, unchanged: id ``i < n`` is the residual stream
  entering layer ``i``; id ``n`` the stream after the last layer, before the
  final norm), as in 0.33.
* ``GET /v1/models``: one model, named as served (the verifier path).

Not modelled: streaming, several prompts in one request, chat completions,
prefix caching, ``max_model_len``; these answer 400. A test fixture, not a feature.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import torch
from local_server import LocalServer
from safetensors.torch import save_file

__all__ = ["VllmHiddenStatesServer", "vllm_layer_ids"]

_MASK_64_BITS = (1 << 64) - 1


def _random_uuid() -> str:
    """``vllm.utils.random_uuid``: 16 hex digits."""
    return f"{uuid.uuid4().int & _MASK_64_BITS:016x}"


def vllm_layer_ids(num_hidden_layers: int) -> list[int]:
    """The ``eagle_aux_hidden_state_layer_ids`` ``speculators launch-vllm`` passes
    by default: the trainer's aux layers and the final state (id ``n``)."""
    from speculators.data_generation.vllm_launch import extraction_layer_ids
    from speculators.utils.target_layers import default_target_layer_ids

    layer_ids, aux = extraction_layer_ids(num_hidden_layers)
    assert aux == default_target_layer_ids(num_hidden_layers)
    assert layer_ids == [*aux, num_hidden_layers]
    return layer_ids


class VllmHiddenStatesServer(LocalServer):
    """``vllm serve VERIFIER`` with ``extract_hidden_states`` and the example
    hidden-states connector, on 127.0.0.1 (a free port). A context manager;
    ``endpoint`` is the ``.../v1`` base URL.

    :param layer_ids: ``eagle_aux_hidden_state_layer_ids``; default: what
        ``speculators launch-vllm`` passes (:func:`vllm_layer_ids`).
    :param dtype: the served dtype (``vllm serve --dtype``).
    :param write_delay_s: how long the writer thread waits before writing, so a
        client that reads the file without taking the lock would find none.
    """

    def __init__(
        self,
        verifier: str | Path,
        shared_storage_path: str | Path,
        *,
        layer_ids: list[int] | None = None,
        dtype: torch.dtype = torch.bfloat16,
        use_synchronization_lock: bool = True,
        allow_custom_save_path: bool = False,
        write_delay_s: float = 0.05,
        trust_remote_code: bool = False,
    ) -> None:
        from speculators_kimi.verifier import load_causal_verifier
        from speculators_kimi.verifier.capture import decoder_parts

        self.model_name = str(verifier)
        self.storage = str(shared_storage_path)
        self.use_lock = use_synchronization_lock
        self.allow_custom_save_path = allow_custom_save_path
        self.write_delay_s = write_delay_s
        self.verifier = load_causal_verifier(
            verifier, [], dtype=dtype, trust_remote_code=trust_remote_code
        )
        self.decoder = self.verifier.decoder
        n = int(self.verifier.text_config.num_hidden_layers)
        self.num_hidden_layers = n
        self.layer_ids = list(layer_ids) if layer_ids is not None else vllm_layer_ids(n)
        self._norm = decoder_parts(self.decoder)[1]
        #: Every request body and the kv_transfer_params answered, in order.
        self.requests: list[dict[str, Any]] = []
        self.files: list[str] = []
        self._forward_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="vllm-hs-save"
        )
        super().__init__(_handler(self))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._executor.shutdown(wait=True)

    # -- the model ---------------------------------------------------------------

    @torch.no_grad()
    def states(self, token_ids: list[int]) -> tuple[torch.Tensor, int]:
        """``[len(token_ids), len(layer_ids), hidden]`` in the served dtype, and
        the greedy next token (what ``max_tokens=1`` samples at temperature 0)."""
        from speculators_kimi.verifier import capture_hidden_states

        ids = torch.tensor([token_ids], dtype=torch.long)
        # The model appends states in layer order (vLLM 0.34 deepseek_v2.py
        # l. 1546-1587, as in 0.33), whatever the order of the config's ids.
        order = sorted(self.layer_ids)
        with self._forward_lock:
            # One entry per id (id n hooks the final norm's input) plus the
            # final norm's input again, last: dropped.
            hs, _ = capture_hidden_states(self.decoder, ids, order)
            final = hs[0, -1, -1]
            logits = self.verifier._logits(self._norm(final[None])[0])
        return hs[0, :, : len(order)].contiguous(), int(logits.argmax())

    # -- the connector -----------------------------------------------------------

    def _filename(self, req_id: str, kv_params: dict[str, Any]) -> str:
        custom = kv_params.get("hidden_states_path")
        if custom is not None and not self.allow_custom_save_path:
            custom = None
        return custom or str(Path(self.storage) / f"{req_id}.safetensors")

    def _take_lock(self, filename: str) -> int | None:
        if not self.use_lock:
            return None
        lock_path = filename + ".lock"
        Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _write(
        self, tensors: dict[str, torch.Tensor], filename: str, lock_fd: int | None
    ) -> None:
        try:
            time.sleep(self.write_delay_s)
            save_file(tensors, filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # releases LOCK_EX

    def complete(self, body: dict[str, Any], header_id: str | None) -> dict[str, Any]:
        """The ``CompletionResponse`` of one ``/v1/completions`` body."""
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            if len(prompt) != 1:
                raise ValueError("this stand-in serves one prompt per request")
            prompt = prompt[0]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            raise ValueError("this stand-in takes token-id prompts only")
        if body.get("stream"):
            raise ValueError("this stand-in does not stream")
        max_tokens = body.get("max_tokens", 16)
        if max_tokens != 1:
            raise ValueError("this stand-in samples one token (max_tokens=1)")
        base_id = header_id if header_id is not None else body.get("request_id")
        request_id = f"cmpl-{base_id if base_id is not None else _random_uuid()}"
        req_id = f"{request_id}-0-{_random_uuid():.8}"
        kv_params = body.get("kv_transfer_params") or {}
        filename = self._filename(req_id, kv_params)
        lock_fd = self._take_lock(filename)  # wait_for_save: before the answer
        try:
            hs, token = self.states(prompt)
            if kv_params.get("include_output_tokens", False):
                saved_ids = [*prompt, token][:-1]
            else:
                saved_ids = list(prompt)
            tensors = {
                "hidden_states": hs,
                "token_ids": torch.tensor(saved_ids, dtype=torch.long),
            }
            # as the connector: the directory is made before submitting (its l. 425)
            Path(filename).parent.mkdir(parents=True, exist_ok=True)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        self._executor.submit(self._write, tensors, filename, lock_fd)
        self.files.append(filename)
        transfer = {"hidden_states_path": filename}
        return_ids = bool(body.get("return_token_ids"))
        return {
            "id": request_id,
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "text": "",
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": [token] if return_ids else None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": list(prompt) if return_ids else None,
                    "routed_experts": None,
                    "weight_versions": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {
                "prompt_tokens": len(prompt),
                "total_tokens": len(prompt) + 1,
                "completion_tokens": 1,
                "completion_tokens_details": None,
            },
            "kv_transfer_params": transfer,
            "ec_transfer_params": None,
            "metrics": None,
        }

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": self.model_name,
                    "parent": None,
                    "max_model_len": getattr(
                        self.verifier.text_config, "max_position_embeddings", None
                    ),
                    "permission": [],
                }
            ],
        }


def _handler(server: VllmHiddenStatesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: HTTPStatus, message: str) -> None:
            self._send(
                status,
                {
                    "error": {
                        "message": message,
                        "type": status.phrase.replace(" ", ""),
                        "param": None,
                        "code": int(status),
                    }
                },
            )

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(HTTPStatus.OK, server.models())
            elif self.path == "/health":
                self._send(HTTPStatus.OK, {})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions":
                self._send(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})
                return
            try:
                answer = server.complete(body, self.headers.get("X-Request-Id"))
            except ValueError as err:
                self._error(HTTPStatus.BAD_REQUEST, str(err))
                return
            server.requests.append(
                {"body": body, "kv_transfer_params": answer["kv_transfer_params"]}
            )
            self._send(HTTPStatus.OK, answer)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
