"""The ``vllm serve`` command that writes a verifier's hidden states for training.

vLLM's ``extract_hidden_states`` speculative method captures the hidden states of
the layers named by ``eagle_aux_hidden_state_layer_ids`` in its draft config, and a
hidden-states KV connector (one per :class:`hs_connectors.HiddenStatesBackend`)
hands them to ``speculators generate-offline-data`` or ``speculators train
--vllm-endpoint``. The layer count comes from the verifier's text config however
it is nested (:func:`~speculators.utils.text_config.load_text_config`) and the
default layers from the trainer's own choice
(:func:`~speculators.utils.target_layers.default_target_layer_ids`), so the states
vLLM writes are the ones the draft reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from speculators.utils.target_layers import (
    check_target_layer_ids,
    default_target_layer_ids,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "EXTRACT_HIDDEN_STATES",
    "LaunchPlan",
    "VllmLaunchError",
    "build_launch_parser",
    "build_launch_plan",
    "extraction_layer_ids",
    "main",
]

#: vLLM's speculative method that only captures hidden states (no draft model).
EXTRACT_HIDDEN_STATES = "extract_hidden_states"

_USAGE = (
    "speculators launch-vllm [-h] MODEL [--hidden-states-backend BACKEND] "
    "[--target-layer-ids ID [ID ...]] [--[no-]include-last-layer] "
    "[--trust-remote-code] [--dry-run] -- [VLLM_ARGS ...]"
)


class VllmLaunchError(ValueError):
    """The launch cannot be built or run (bad layer ids, vLLM not installed)."""


@dataclass(frozen=True)
class LaunchPlan:
    """What ``vllm serve`` is launched with, and why.

    :param command: the full argument vector, ``vllm`` first.
    :param num_hidden_layers: the verifier's text-config layer count.
    :param layer_ids: the layer ids vLLM extracts, the final one last when
        ``--include-last-layer``.
    :param aux_layer_ids: the draft's auxiliary layers (``layer_ids`` without the
        appended final layer), what ``speculators train --target-layer-ids`` takes.
    :param explicit: whether ``--target-layer-ids`` chose the layers.
    """

    command: list[str]
    num_hidden_layers: int
    layer_ids: list[int]
    aux_layer_ids: list[int]
    explicit: bool
    speculative_config: dict[str, Any] = field(default_factory=dict)
    kv_transfer_config: dict[str, Any] = field(default_factory=dict)

    @property
    def shell_command(self) -> str:
        """The command as one shell-quoted line, to copy or to run elsewhere."""
        return shlex.join(self.command)


def _backends() -> dict[str, Any]:
    # Imported when a launch is built: hs_connectors imports torch.
    from hs_connectors import HiddenStatesBackend  # noqa: PLC0415

    return dict(HiddenStatesBackend.registry)


def build_launch_parser() -> argparse.ArgumentParser:
    """The launcher's own flags, each registered backend's launch flags included.

    :return: the parser for the arguments before ``--``.
    """
    backends = _backends()
    parser = argparse.ArgumentParser(
        prog="speculators launch-vllm",
        usage=_USAGE,
        description=(
            "Launch 'vllm serve MODEL' with the extract_hidden_states speculative "
            "method and a hidden-states KV connector, capturing the layers "
            "'speculators train' builds an EAGLE-3 draft on. Arguments after '--' "
            "go to 'vllm serve' unchanged."
        ),
        allow_abbrev=False,
    )
    parser.add_argument(
        "model", help="The verifier: a local directory or a Hugging Face Hub id."
    )
    parser.add_argument(
        "--hidden-states-backend",
        choices=sorted(backends),
        default="file",
        help="How vLLM hands hidden states to the trainer (default: file).",
    )
    for backend_cls in backends.values():
        backend_cls.add_launch_args(parser)
    parser.add_argument(
        "--target-layer-ids",
        type=int,
        nargs="+",
        default=None,
        metavar="ID",
        help=(
            "Auxiliary layer ids to capture. Default: the trainer's "
            "[2, n // 2, n - 3] for n text-config layers. Custom ids must also be "
            "passed to 'speculators train --target-layer-ids'."
        ),
    )
    parser.add_argument(
        "--include-last-layer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=(
            "Also capture the final hidden state (layer id n), which training "
            "reads as its target (default: on)."
        ),
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help=(
            "Run the checkpoint's configuration code to read its config (without "
            "it, config.json is read as data); also passed to 'vllm serve'."
        ),
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Print the 'vllm serve' command (shell-quoted) and exit.",
    )
    return parser


def extraction_layer_ids(
    num_hidden_layers: int,
    target_layer_ids: Sequence[int] | None = None,
    *,
    include_last_layer: bool = True,
) -> tuple[list[int], list[int]]:
    """The layers vLLM extracts, and the draft's auxiliary layers among them.

    :param num_hidden_layers: the verifier's text-config layer count.
    :param target_layer_ids: explicit auxiliary layer ids, or ``None`` for the
        trainer's defaults.
    :param include_last_layer: append the final hidden state (id
        ``num_hidden_layers``) when it is not already listed.
    :return: ``(layer_ids, aux_layer_ids)``.
    :raises ValueError: if the ids do not fit the verifier (the trainer's check).
    """
    aux = (
        list(target_layer_ids)
        if target_layer_ids is not None
        else default_target_layer_ids(num_hidden_layers)
    )
    check_target_layer_ids(
        aux, num_hidden_layers, explicit=target_layer_ids is not None
    )
    layer_ids = list(aux)
    if include_last_layer and num_hidden_layers not in layer_ids:
        layer_ids.append(num_hidden_layers)
    return layer_ids, aux


def build_launch_plan(
    args: argparse.Namespace, vllm_args: Sequence[str] = ()
) -> LaunchPlan:
    """Resolve the verifier's layers and build the ``vllm serve`` command.

    :param args: the parsed launcher flags (:func:`build_launch_parser`).
    :param vllm_args: arguments for ``vllm serve``, passed through unchanged.
    :return: the launch plan.
    :raises ModelSourceError: if ``args.model`` names no readable checkpoint.
    :raises VllmLaunchError: if the layer ids do not fit the verifier, or
        ``vllm_args`` set the speculative or KV-transfer config.
    """
    # Imported here: transformers is only needed once a launch is built.
    from speculators.utils.cli_errors import check_model_source  # noqa: PLC0415
    from speculators.utils.text_config import load_text_config  # noqa: PLC0415

    check_model_source(args.model, "MODEL")
    text_config = load_text_config(args.model, trust_remote_code=args.trust_remote_code)
    num_layers = int(text_config.num_hidden_layers)
    try:
        layer_ids, aux = extraction_layer_ids(
            num_layers,
            args.target_layer_ids,
            include_last_layer=args.include_last_layer,
        )
    except ValueError as err:
        raise VllmLaunchError(
            f"--target-layer-ids for {args.model} (text config: {num_layers} "
            f"layers): {err}"
        ) from None
    _check_not_overridden(vllm_args)
    speculative_config = {
        "method": EXTRACT_HIDDEN_STATES,
        "num_speculative_tokens": 1,
        "draft_model_config": {
            "hf_config": {"eagle_aux_hidden_state_layer_ids": layer_ids}
        },
    }
    backend_cls = _backends()[args.hidden_states_backend]
    kv_transfer_config = backend_cls.build_kv_transfer_config(args)
    passed = list(vllm_args)
    if args.trust_remote_code and "--trust-remote-code" not in passed:
        passed.append("--trust-remote-code")
    command = [
        "vllm",
        "serve",
        args.model,
        "--speculative-config",
        json.dumps(speculative_config),
        "--kv-transfer-config",
        json.dumps(kv_transfer_config),
        *passed,
    ]
    return LaunchPlan(
        command=command,
        num_hidden_layers=num_layers,
        layer_ids=layer_ids,
        aux_layer_ids=aux,
        explicit=args.target_layer_ids is not None,
        speculative_config=speculative_config,
        kv_transfer_config=kv_transfer_config,
    )


#: ``vllm serve`` flags the launcher sets itself (either spelling vLLM accepts).
_OWN_VLLM_FLAGS = frozenset({"--speculative-config", "-sc", "--kv-transfer-config"})


def _check_not_overridden(vllm_args: Sequence[str]) -> None:
    """Refuse vLLM arguments that would replace the extraction config."""
    for arg in vllm_args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--"):
            flag = "--" + flag[2:].replace("_", "-")
        if flag in _OWN_VLLM_FLAGS:
            raise VllmLaunchError(
                f"{arg.split('=', 1)[0]} after '--' would replace the hidden-state "
                "extraction config that launch-vllm builds; drop it (use "
                "--target-layer-ids and --hidden-states-backend instead)."
            )


def _split_vllm_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Ours before the first ``--``, vLLM's after it."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def main(argv: Sequence[str]) -> LaunchPlan:
    """Parse ``argv``, print the command, and run it unless ``--dry-run``.

    :param argv: the launcher's arguments, then ``--`` and vLLM's.
    :return: the plan (only with ``--dry-run``: otherwise vLLM replaces this
        process).
    :raises VllmLaunchError: if the layer ids do not fit, or no ``vllm``
        executable is installed.
    """
    ours, vllm_args = _split_vllm_args(argv)
    parser = build_launch_parser()
    args, unknown = parser.parse_known_args(ours)
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} (pass vLLM's own "
            "arguments after '--')"
        )
    plan = build_launch_plan(args, vllm_args)
    if plan.explicit:
        print(  # noqa: T201
            "note: custom layers; train with --target-layer-ids "
            + " ".join(map(str, plan.aux_layer_ids)),
            file=sys.stderr,
        )
    if args.dry_run:
        print(plan.shell_command)  # noqa: T201
        return plan
    executable = shutil.which(plan.command[0])
    if executable is None:
        raise VllmLaunchError(
            "vLLM is not installed: no 'vllm' executable on PATH. Install it "
            "(pip install vllm), or run the command that --dry-run prints where "
            "vLLM is installed."
        )
    print(f"Running: {plan.shell_command}", file=sys.stderr, flush=True)  # noqa: T201
    os.execv(executable, plan.command)  # noqa: S606
    return plan  # pragma: no cover (execv does not return)
