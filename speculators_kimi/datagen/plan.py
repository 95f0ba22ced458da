"""What to compute: aux layer ids, batches by length, the context-window check,
and the run's whole plan (:func:`plan_generation`), made before any model loads.

Batches depend only on the dataset's lengths (never on what is already on disk),
so a resumed run recomputes the same batches and writes the same bytes.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from speculators.data_generation.provenance import decoder_fingerprint

from ..errors import CommandError
from ..verifier.resolved import (
    ResolvedVerifier,
    resolve_decoder,
    whole_local_verifier,
)
from . import store
from .ranks import Ranks, current_ranks

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from .options import GenerationOptions

__all__ = [
    "ContextLengthError",
    "DataVocabularyError",
    "GenerationPlan",
    "OtherDataError",
    "OtherSettingsError",
    "OtherVerifierError",
    "check_context",
    "check_vocabulary",
    "default_target_layer_ids",
    "plan_batches",
    "plan_generation",
]

#: A dataset row's token ids.
Row = tuple[int, ...]


class ContextLengthError(CommandError):
    """A sample is longer than the verifier's context window."""


class DataVocabularyError(CommandError):
    """A sample holds a token id past the verifier's vocabulary."""


class OtherSettingsError(CommandError):
    """Finished files made with other ``--target-layer-ids`` or ``--dtype`` are
    in the output directory, and ``--overwrite`` was not given."""


class OtherDataError(CommandError):
    """Finished files of other tokens are in an output directory that is not
    the dataset's own, and ``--overwrite`` was not given (another dataset's
    states, which a rerun would replace)."""


class OtherVerifierError(CommandError):
    """Finished files of another verifier are in the output directory and
    ``on_mismatch`` is ``"error"``."""


@dataclass(frozen=True)
class GenerationPlan:
    """What one run writes, decided (and every refusal made) before any model loads.

    :param verifier: the verifier, resolved once; the loader takes it as it is.
    :param rows: every sample's token ids, by index.
    :param layer_ids: the aux layer ids, as the trainer resolves them.
    :param fingerprint: the verifier's content fingerprint (files' provenance).
    :param states: what each sample's file in ``out_dir`` is now.
    :param batches: sample indices, batched over the whole dataset by length.
    :param todo: per batch, the samples whose files are (re)written.
    :param ranks: this process's place in a ``torchrun`` job.
    """

    verifier: ResolvedVerifier
    out_dir: Path
    rows: tuple[Row, ...]
    layer_ids: tuple[int, ...]
    dtype: torch.dtype
    fingerprint: str
    states: tuple[store.FileState, ...]
    batches: tuple[Row, ...]
    todo: tuple[Row, ...]
    ranks: Ranks

    @property
    def skipped(self) -> int:
        """Samples whose files are finished and kept."""
        return len(self.rows) - sum(len(t) for t in self.todo)

    @property
    def other_verifier(self) -> int:
        """Finished files of another verifier (regenerated)."""
        return self.states.count(store.FileState.OTHER_VERIFIER)

    @property
    def other_tokens(self) -> int:
        """Finished files of other tokens: the dataset's earlier preparation's,
        or another dataset's with ``--overwrite`` (regenerated)."""
        return self.states.count(store.FileState.OTHER_TOKENS)


def default_target_layer_ids(
    verifier: str | Path,
    target_layer_ids: Sequence[int] | None = None,
    *,
    trust_remote_code: bool = False,
) -> list[int]:
    """Aux layer ids exactly as upstream's trainer resolves them for ``verifier``.

    Resolves, never defines: the default ids and their check have one home,
    :mod:`speculators.utils.target_layers`, which the trainer's resolver uses.
    """
    from speculators.models.utils import resolve_target_layer_ids

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(
            resolve_target_layer_ids(
                list(target_layer_ids) if target_layer_ids is not None else None,
                str(verifier),
                trust_remote_code=trust_remote_code,
            )
        )


def plan_batches(
    lengths: Sequence[int], *, batch_size: int, max_batch_tokens: int
) -> list[list[int]]:
    """Sample indices grouped by length (longest first); depends only on ``lengths``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for idx in order:
        # Sorted longest first: the batch's padded length is its first sample's.
        width = lengths[current[0]] if current else lengths[idx]
        if current and (
            len(current) >= batch_size or width * (len(current) + 1) > max_batch_tokens
        ):
            batches.append(current)
            current = []
        current.append(idx)
    if current:
        batches.append(current)
    return batches


def check_context(lengths: Sequence[int], limit: int | None) -> None:
    """Fail before any work when a sample does not fit the verifier's context.

    :raises ContextLengthError: naming the first sample that is too long.
    """
    if not limit:
        return
    for idx, n in enumerate(lengths):
        if n > limit:
            raise ContextLengthError(
                f"sample {idx} has {n} tokens, more than the verifier's context "
                f"(max_position_embeddings={limit}); re-run prepare-data with "
                f"--seq-length {limit} or less"
            )


def check_vocabulary(rows: Sequence[Row], vocab_size: int | None) -> None:
    """Fail before any work when a sample holds a token id the verifier's
    embedding does not have (data prepared with another tokenizer).

    :raises DataVocabularyError: naming the first such sample and id.
    """
    if not vocab_size:
        return
    for idx, row in enumerate(rows):
        if row and max(row) >= vocab_size:
            raise DataVocabularyError(
                f"sample {idx} has token id {max(row)}, past the verifier's "
                f"vocabulary (vocab_size={vocab_size}): the data was prepared with "
                "another tokenizer; re-run prepare-data with this verifier's"
            )


def plan_generation(options: GenerationOptions) -> GenerationPlan:
    """The plan of :func:`~.generate.run_generation` for ``options``.

    Every refusal comes before any work, in the order the checks always had, so a
    run with several faults names the same one first. It creates the output
    directory and removes a killed run's temporary files; it writes no sample.
    """
    from speculators.train.data_checks import (
        check_data_tokenizer,
        check_prepared_dataset,
    )

    verifier, trust_remote_code = options.verifier, options.trust_remote_code
    data_path = Path(options.data_path)
    out_dir = (
        Path(options.output_dir)
        if options.output_dir is not None
        else data_path / store.HS_DIRNAME
    )
    check_prepared_dataset(data_path)  # a path that is not one: one line, named
    # rows of another tokenizer than the verifier's: states of text nobody wrote
    check_data_tokenizer(data_path, verifier, trust_remote_code=trust_remote_code)
    ranks = current_ranks()
    if ranks.distributed and options.placement is not None:
        raise CommandError(
            "--device-map/--max-memory spread one verifier over several devices; "
            "under torchrun each rank loads its own copy. Use one or the other"
        )
    rows = _token_rows(data_path)
    text_config, layer_ids, path = _check_verifier(
        verifier, rows, options.target_layer_ids, trust_remote_code=trust_remote_code
    )
    _prepare_output_dir(out_dir, ranks)
    resolved = resolve_decoder(
        verifier,
        path,
        text_config,
        trust_remote_code=trust_remote_code,
        weight_overrides=options.weight_overrides,
    )
    fingerprint = decoder_fingerprint(verifier, resolved.prefix)
    dtype = options.torch_dtype
    states = _file_states(out_dir, rows, resolved, layer_ids, dtype, fingerprint)
    ranks.barrier()  # every rank has looked before any rank writes
    if options.on_mismatch == "error":
        _refuse_other_verifier(states, out_dir, verifier)
    if not options.overwrite:
        _refuse_other_settings(states, out_dir, layer_ids, dtype)
        if out_dir.resolve() != (data_path / store.HS_DIRNAME).resolve():
            _refuse_other_data(states, out_dir, data_path)
    batches = plan_batches(
        [len(r) for r in rows],
        batch_size=options.batch_size,
        max_batch_tokens=options.max_batch_tokens,
    )
    todo = [
        [i for i in b if options.overwrite or states[i] is not store.FileState.DONE]
        for b in batches
    ]
    return GenerationPlan(
        verifier=resolved,
        out_dir=out_dir,
        rows=rows,
        layer_ids=tuple(layer_ids),
        dtype=dtype,
        fingerprint=fingerprint,
        states=states,
        batches=tuple(map(tuple, batches)),
        todo=tuple(map(tuple, todo)),
        ranks=ranks,
    )


def _token_rows(data_path: Path) -> tuple[Row, ...]:
    """Every sample's ``input_ids``, as ints."""
    from datasets import load_from_disk

    dataset = load_from_disk(str(data_path)).with_format(None)
    return tuple(tuple(map(int, r)) for r in dataset["input_ids"])


def _check_verifier(
    verifier: str | Path,
    rows: Sequence[Row],
    target_layer_ids: Sequence[int] | None,
    *,
    trust_remote_code: bool,
) -> tuple[PretrainedConfig, list[int], Path]:
    """The text config, the aux layer ids and the local directory, checked: the
    context window, then the layer ids, then every shard."""
    from speculators.utils.text_config import load_text_config

    text_config = load_text_config(str(verifier), trust_remote_code=trust_remote_code)
    limit = getattr(text_config, "max_position_embeddings", None)
    check_context([len(r) for r in rows], limit)
    check_vocabulary(rows, getattr(text_config, "vocab_size", None))
    layer_ids = default_target_layer_ids(
        verifier, target_layer_ids, trust_remote_code=trust_remote_code
    )
    # Before anything reads a shard (the fingerprint, a resume's checks, the load).
    return text_config, layer_ids, whole_local_verifier(verifier)


def _prepare_output_dir(out_dir: Path, ranks: Ranks) -> None:
    """Create ``out_dir`` (proven writable) and clear a killed run's temporaries."""
    store.prepare_output_dir(out_dir)
    if ranks.is_main:  # not while another rank may be writing one
        store.remove_stale_temps(out_dir)
    ranks.barrier()


def _file_states(
    out_dir: Path,
    rows: Sequence[Row],
    verifier: ResolvedVerifier,
    layer_ids: Sequence[int],
    dtype: torch.dtype,
    fingerprint: str,
) -> tuple[store.FileState, ...]:
    """What each sample's file in ``out_dir`` is, against what would be written."""
    return tuple(
        store.file_state(
            store.hs_path(out_dir, i),
            row,
            num_entries=len(layer_ids) + 1,
            hidden_size=int(verifier.text_config.hidden_size),
            dtype=dtype,
            layer_ids=layer_ids,
            fingerprint=fingerprint,
        )
        for i, row in enumerate(rows)
    )


def _files_found(
    states: Sequence[store.FileState], state: store.FileState, out_dir: Path
) -> tuple[Path, str] | None:
    """The first file in ``state`` and "N of M files in DIR (the first: NAME)"
    for the messages; None when no file is."""
    found = [i for i, s in enumerate(states) if s is state]
    if not found:
        return None
    first = store.hs_path(out_dir, found[0])
    return first, (
        f"{len(found)} of {len(states)} files in {out_dir} (the first: {first.name})"
    )


def _refuse_other_settings(
    states: Sequence[store.FileState],
    out_dir: Path,
    layer_ids: Sequence[int],
    dtype: torch.dtype,
) -> None:
    """:raises OtherSettingsError: finished files were made with other flags
    (a rerun that forgot one would replace the work it meant to resume)."""
    found = _files_found(states, store.FileState.OTHER_SETTINGS, out_dir)
    if found is None:
        return
    first, files = found
    made_ids, made_dtype = store.file_settings(first)
    ours = str(dtype).removeprefix("torch.")
    raise OtherSettingsError(
        f"{files} were generated with --target-layer-ids "
        f"{' '.join(map(str, made_ids or []))} --dtype {made_dtype}, this run asks "
        f"for {' '.join(map(str, layer_ids))} and {ours}: pass theirs to resume "
        "them, --overwrite to regenerate them with these, or another --output-dir"
    )


def _refuse_other_data(
    states: Sequence[store.FileState], out_dir: Path, data_path: Path
) -> None:
    """:raises OtherDataError: finished files of other tokens are in ``out_dir``,
    which is not ``data_path``'s own folder: another dataset's work (in the
    dataset's own folder they are its earlier preparation's, replaced)."""
    found = _files_found(states, store.FileState.OTHER_TOKENS, out_dir)
    if found is not None:
        raise OtherDataError(
            f"{found[1]} hold the states of other tokens than {data_path}'s rows: "
            "another dataset's; pass --overwrite to replace them, or another "
            f"--output-dir (default: {data_path / store.HS_DIRNAME})"
        )


def _refuse_other_verifier(
    states: Sequence[store.FileState], out_dir: Path, verifier: str | Path
) -> None:
    """:raises OtherVerifierError: some finished files are another verifier's."""
    found = _files_found(states, store.FileState.OTHER_VERIFIER, out_dir)
    if found is not None:
        raise OtherVerifierError(
            f"{found[1]} were generated by another verifier than {verifier} (other "
            "weights or config); pass --on-mismatch regenerate to replace them, or "
            "another --output-dir"
        )
