"""``python -m speculators_kimi.tiny_verifier OUT_DIR``: a tiny Llama verifier and
its offline EAGLE-3 dataset under ``OUT_DIR``; prints the ``speculators train``
command to run on them (``examples/train_tiny_llama.sh`` does).
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path

# The entry point, above the package: the hidden states are datagen's.
from ..datagen.fixture import build_dataset
from .dense import build_verifier
from .specs import TinyVerifierSpec
from .train import train_command


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: build verifier + dataset under OUT_DIR and print the train command."""
    parser = argparse.ArgumentParser(
        description="Build a tiny Llama verifier and its dataset."
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--num-layers", type=int, default=TinyVerifierSpec.num_layers)
    parser.add_argument("--num-samples", type=int, default=TinyVerifierSpec.num_samples)
    parser.add_argument("--seed", type=int, default=TinyVerifierSpec.seed)
    args = parser.parse_args(argv)

    spec = TinyVerifierSpec(
        num_layers=args.num_layers, num_samples=args.num_samples, seed=args.seed
    )
    out: Path = args.out_dir.resolve()
    verifier_dir = build_verifier(spec, out / "verifier")
    data_dir = build_dataset(spec, verifier_dir, out / "data")
    print(shlex.join(train_command(spec, verifier_dir, data_dir, out / "run")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
