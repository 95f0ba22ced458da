"""Is every shard of a local checkpoint there and whole? One answer for every command.

The weight map (``model.safetensors.index.json``) names the shards; each must
exist and be as long as its header says. ``safetensors`` checks that when it
opens a file (headers only, no tensor is read). ``doctor`` reports each bad
shard as a problem; the commands that load the verifier refuse it with one line
before they read anything else, instead of failing deep in ``safe_open`` (or,
for a missing shard, in a plain ``open``) with a traceback.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandError

__all__ = ["BrokenShardError", "ShardCheck", "check_shards", "require_whole_shards"]


class BrokenShardError(CommandError):
    """A shard the verifier's weight map names is missing, truncated or corrupt."""


@dataclass(frozen=True)
class ShardCheck:
    """One shard of the weight map: the tensors it should hold, and what is wrong.

    :param shard: the file name, as the weight map gives it.
    :param path: the file in the checkpoint directory.
    :param keys: the tensors the weight map puts there, sorted.
    :param fault: ``None`` when it is present and whole; else ``"missing"``,
        ``"truncated (N of M bytes)"`` or ``"unreadable (<safetensors' error>)"``.
    """

    shard: str
    path: Path
    keys: tuple[str, ...]
    fault: str | None = None

    @property
    def ok(self) -> bool:
        return self.fault is None

    def problem(self) -> str:
        """``Shard <path> is <fault>; the weight map puts N tensors there (...)``."""
        named = ", ".join(self.keys[:3]) + (", ..." if len(self.keys) > 3 else "")
        return (
            f"Shard {self.path} is {self.fault}; the weight map puts "
            f"{len(self.keys)} tensors there ({named})"
        )


def _truncation(path: Path) -> str | None:
    """``"truncated (...)"`` when the file is shorter than its header says."""
    size = path.stat().st_size
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if 8 + length > size:
                return f"truncated ({size} bytes, inside its {length}-byte header)"
            header = json.loads(handle.read(length))
        ends = [
            int(info["data_offsets"][1])
            for key, info in header.items()
            if key != "__metadata__"
        ]
    except (OSError, ValueError, struct.error, KeyError, TypeError, IndexError):
        return None  # not a header that says how long the file is
    expected = 8 + length + max(ends, default=0)
    return f"truncated ({size} of {expected} bytes)" if size < expected else None


def _fault(path: Path) -> str | None:
    from speculators.utils.verifier_weights.files import read_shard_metadata
    from speculators.utils.verifier_weights.spec import VerifierWeightsError

    if not path.is_file():
        return "missing"
    try:
        read_shard_metadata(path)
    except VerifierWeightsError as err:
        return _truncation(path) or f"unreadable ({err.__cause__ or err})"
    return None


def check_shards(verifier: str | Path) -> list[ShardCheck]:
    """Every shard the weight map of a local checkpoint names, checked, by name.

    :raises VerifierWeightsError: there is no safetensors weight map, it is not
        JSON, or the single ``model.safetensors`` cannot be read.
    """
    from speculators.utils.verifier_weights.files import read_weight_index

    by_shard: dict[str, list[str]] = {}
    for key, shard in read_weight_index(verifier).items():
        by_shard.setdefault(shard, []).append(key)
    checks = []
    for shard, keys in sorted(by_shard.items()):
        path = Path(verifier) / shard
        checks.append(ShardCheck(shard, path, tuple(sorted(keys)), _fault(path)))
    return checks


def require_whole_shards(verifier: str | Path) -> None:
    """Refuse a local checkpoint with a missing, truncated or corrupt shard.

    :raises BrokenShardError: the first bad shard, named with what is wrong and
        the fix (and how many others are bad).
    """
    bad = [c for c in check_shards(verifier) if c.fault is not None]
    if not bad:
        return
    more = ""
    if len(bad) > 1:
        more = f" ({len(bad) - 1} more: {', '.join(c.shard for c in bad[1:])})"
    raise BrokenShardError(
        f"{bad[0].problem()}{more}; re-download the checkpoint (or this shard), "
        f"then rerun (`speculators-kimi doctor {verifier}` checks every shard)"
    )
