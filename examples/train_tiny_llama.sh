#!/usr/bin/env bash
# Train an EAGLE-3 draft for a few steps on a tiny random-weight Llama verifier,
# on CPU, through the standard `speculators train` command.
#   examples/train_tiny_llama.sh [OUT_DIR]   (default: ./tiny-llama-eagle3)
set -euo pipefail
out="${1:-tiny-llama-eagle3}"

# 1. The verifier (tiny Llama + tokenizer) and its offline dataset: prepare-data
#    output plus hidden states, in upstream's on-disk format.
cmd="$(python -m speculators_kimi.tiny_verifier "$out")"

# 2. Upstream's trainer, unchanged (on CPU it picks sdpa attention + eager loss).
echo "+ $cmd"
eval "$cmd"

python - "$out" <<'PY'
import json, sys
from pathlib import Path
from speculators.models import Eagle3DraftModel
ckpt = Path(sys.argv[1]) / "run" / "checkpoints" / "0"
model = Eagle3DraftModel.from_pretrained(ckpt)
metrics = json.loads((ckpt / "val_metrics.json").read_text())
n = sum(p.numel() for p in model.parameters())
print(f"draft checkpoint: {ckpt} ({n} parameters), val loss {metrics['loss_epoch']:.4f}")
PY
