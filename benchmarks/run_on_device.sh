#!/usr/bin/env bash
# One prepared run on the lent GPU (the device tool's `run`): CUDA correctness of
# the Triton kernels, then the benchmarks, each writing under $OUT. Steps are
# independent: one failing does not stop the others; the exit code is the number
# of failed steps. Never edit numbers into results: commit the JSON as written.
#
# From this machine (no GPU needed to prepare):
#   pip install --no-build-isolation --no-deps -e .        # fills .vendored/
#   pip download --only-binary=:all: --python-version 3.12 --no-deps -d .device-wheels \
#       <upstream's deps the image lacks>   # 2026-12-04's image: see benchmarks/README.md
#   echo /.device-wheels/ >> .git/info/exclude
# then the device tool's run with
#   carry: [".vendored", "speculators_kimi/_build_info.py", ".device-wheels"]
#   command: bash benchmarks/run_on_device.sh      timeout_s: 540
set -u
OUT=${OUT:?set by the device tool}
export PYTHONPATH="$PWD:$PWD/.vendored/src${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_DEFAULT_FP_FUSION=1
failed=0
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log under $OUT
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s)"
    if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
        echo "   ok"
    else
        echo "   FAILED ($?)"
        failed=$((failed + 1))
    fi
    tail -n 5 "$OUT/$name.log"
}

# Not pip-installed there: declare our entry points (pyproject.toml's) in a
# dist-info on the path, so upstream's backend registry finds `triton` the way an
# install does.
python3 - <<'PY'
import pathlib, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path("speculators_kimi_device-0.dist-info")
info.mkdir(exist_ok=True)
(info / "METADATA").write_text("Metadata-Version: 2.1\nName: speculators-kimi-device\nVersion: 0\n")
lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
         for group, eps in project.get("entry-points", {}).items()]
(info / "entry_points.txt").write_text("\n".join(lines))
PY
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__,
    torch.cuda.get_device_name())' >"$OUT/versions.txt" 2>&1
if [ -d .device-wheels ]; then
    python3 -m pip install -q --no-index --no-deps .device-wheels/*.whl \
        >"$OUT/pip.log" 2>&1 || echo "wheel install failed: see pip.log"
fi

step kernel-tests-cuda 240 env SPECULATORS_KIMI_KERNEL_DEVICE=cuda \
    python3 -m pytest -q -p no:cacheprovider tests/kernels/test_draft_attention.py \
    --junitxml "$OUT/kernel-tests-cuda.xml"
step draft-attention 120 python3 benchmarks/draft_attention.py \
    --n 8192 --docs 1 16 --heads 32x8 64x64 --dims 128/128 --steps 7 \
    --rounds 1 --out "$OUT/draft_attention.json"
# the MLA draft (Kimi-K2.5: 64 heads, q/k 192, v 128), same inputs for all impls
step draft-attention-mla 100 python3 benchmarks/draft_attention.py \
    --n 8192 --docs 1 16 --heads 64x64 --dims 192/128 --steps 7 --rounds 1 \
    --out "$OUT/draft_attention_mla.json"
step draft-train-step 90 python3 benchmarks/draft_train_step.py --rounds 2 \
    --out "$OUT/draft_train_step.json"
exit "$failed"
