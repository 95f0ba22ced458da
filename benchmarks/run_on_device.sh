#!/usr/bin/env bash
# One prepared run on the lent GPU (the device tool's `run`): CUDA correctness of
# the Triton kernels, per-kernel timings and a tile sweep, the sweep's winners
# confirmed together, the per-kernel profile of ours and of FlexAttention, the
# attention benchmark and the Kimi-size training step. Steps are independent: one failing or cut by its time limit does not stop
# the others; the exit code is the number of failed steps. Never edit numbers into
# results: commit the JSON as written.
#
# What comes back: the device tool returns at most 8 files from $OUT. Steps write
# into a run folder; after each step $OUT gets steps.tsv, run.tar.gz (everything:
# logs, junit, nvidia-smi, versions, pip's log, every JSON) and the first six JSONs
# by name, so a run cut by the tool's timeout still returns what had finished.
#
# Time: the step limits below add up to 480 s, plus ~15 s of set-up; only the
# kernel_tiles steps catch SIGTERM, so the worst case is about 525 s, inside the
# tool's timeout_s of 540. $OUT/steps.tsv has each step's limit, exit code and
# seconds, for re-cutting them. The device tool lends 15 minutes in all, start-up
# (1-2 minutes) included, and a fresh machine needs 4 minutes left: after the main
# run, a second try fits only while the machine is still warm (send it at once,
# within the tool's idle release), and only of the failed steps:
#   STEPS="kernel-tiles draft-train-step" bash benchmarks/run_on_device.sh
# `sp-memory` and `sp-memory-mla` are opt-in (outside the 480 s): each runs only
# when STEPS names it, in a session of its own (device tool timeout_s: 300; it
# does not fit beside the main run):
#   STEPS="sp-memory" bash benchmarks/run_on_device.sh
# The 2026-12-04 baseline ran on an H200: name kind nvidia-h200 to compare with it
# (each run's ratios are side by side on one card, valid on either).
#
# A rehearsal on this machine (no GPU; 3 minutes): the same steps and arguments,
# each benchmark with --quick under TRITON_INTERPRET=1, the kernel tests collected
# only, nothing installed; it checks the plumbing, never a figure:
#   PATH=$PWD/.venv/bin:$PATH REHEARSE=1 OUT=$(mktemp -d) bash benchmarks/run_on_device.sh
#
# From this machine (no GPU needed to prepare), with the project's venv:
#   pip install --no-build-isolation --no-deps -e .        # fills .vendored/
#   python benchmarks/device_wheels.py     # .device-wheels/: what the image lacks
# then the device tool's run with
#   carry: [".vendored", ".device-wheels"]
#   command: bash benchmarks/run_on_device.sh      timeout_s: 540
set -u
OUT=${OUT:?set by the device tool}
RUN=$(mktemp -d /tmp/device-run.XXXXXX)
export PYTHONPATH="$PWD:$PWD/.vendored/src${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_DEFAULT_FP_FUSION=1
KERNEL_DEVICE=cuda
if [ -n "${REHEARSE:-}" ]; then
    export TRITON_INTERPRET=1
    KERNEL_DEVICE=cpu
fi
started=$SECONDS
failed=0
collect() {  # the run folder into $OUT: at most 8 files come back
    cp "$RUN/steps.tsv" "$OUT/"
    find "$RUN" -maxdepth 1 -name '*.json' | sort | head -n 6 | xargs -r cp -t "$OUT"
    tar czf "$OUT/run.tar.gz" -C "$RUN" .
}
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log in $RUN
    local name=$1 limit=$2 rc=0 t0=$SECONDS
    shift 2
    if [ -n "${REHEARSE:-}" ]; then
        case "$*" in
            *" -m pytest "*) set -- "$@" --collect-only ;;
            *" benchmarks/"*.py*) set -- "$@" --quick ;;
        esac
    fi
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
        return 0
    fi
    echo "== $name (limit ${limit}s, at $((SECONDS - started))s)"
    # SIGTERM at the limit (the Python steps write what they have), KILL 10 s later
    timeout -k 10 "$limit" "$@" >"$RUN/$name.log" 2>&1 || rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$limit" "$rc" "$((SECONDS - t0))" \
        >>"$RUN/steps.tsv"
    if [ "$rc" -eq 0 ]; then
        echo "   ok ($((SECONDS - t0))s)"
    else
        echo "   FAILED rc=$rc ($((SECONDS - t0))s; 124: cut by the limit)"
        failed=$((failed + 1))
    fi
    tail -n 5 "$RUN/$name.log"
    collect
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
printf 'step\tlimit_s\trc\tseconds\n' >"$RUN/steps.tsv"
nvidia-smi >"$RUN/nvidia-smi.txt" 2>&1
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__,
    torch.cuda.get_device_name())' >"$RUN/versions.txt" 2>&1
if [ -d .device-wheels ] && [ -z "${REHEARSE:-}" ]; then
    python3 -m pip install -q --no-index --no-deps .device-wheels/*.whl \
        >"$RUN/pip.log" 2>&1 || echo "wheel install failed: see pip.log"
fi
# Without the carried trees every step would fail on import: stop at once.
if ! python3 -c 'import speculators.train, speculators_kimi.kernels' \
    >"$RUN/imports.txt" 2>&1; then
    echo "cannot import the packages (was .vendored carried?): see imports.txt"
    cat "$RUN/imports.txt"
    collect
    exit 1
fi
echo "set-up done at $((SECONDS - started))s"
collect

# 80 s: the CUDA correctness tests on 8 workers (each compiles its own configs).
# --dist load spreads the one file's tests: pyproject's --dist loadfile sends a whole
# file to one worker (so the 2026-12-04 run was serial); -v names each test as it
# ends, so a cut run still says which passed
step kernel-tests-cuda 80 env SPECULATORS_KIMI_KERNEL_DEVICE=$KERNEL_DEVICE OMP_NUM_THREADS=2 \
    python3 -m pytest -v -n 8 --dist load --confcutdir tests/kernels -p no:cacheprovider \
    tests/kernels/test_draft_attention.py --junitxml "$RUN/kernel-tests-cuda.xml"
# 90 s: every config compiled in parallel first (at most 40 s), then each kernel
# timed alone (32x8 and 64x64 of 128, 64x64 of 192/128; 1 and 16 documents; steps
# 0 and 6), then the tile sweep at step 6 until its deadline
step kernel-tiles 90 python3 benchmarks/kernel_tiles.py --parts timings sweep \
    --deadline 77 --precompile-budget 40 --warmup 20 --rep 60 \
    --out "$RUN/kernel_tiles.json"
# 20 s: the sweep's winners launched together, against the default tiles: at step 6
# (compiled by the sweep), then step 0 while time is left
step kernel-confirm 20 python3 benchmarks/kernel_tiles.py --parts confirm \
    --sweep-from "$RUN/kernel_tiles.json" --deadline 14 --warmup 20 --rep 60 \
    --out "$RUN/kernel_confirm.json"
# 50 s: ours and flex under torch.profiler (flex compiles here: one per shape, step)
step kernel-profile 50 python3 benchmarks/kernel_tiles.py --parts profile \
    --deadline 42 --profile-iters 3 --out "$RUN/kernel_profile.json"
# 75 s: the full benchmark, triton vs flex (sdpa: see the 2026-12-04 run), the
# Llama-style heads of the first run; 64x64 of 128 is in the two steps above and in
# the training step
step draft-attention 75 python3 benchmarks/draft_attention.py \
    --n 8192 --docs 1 16 --heads 32x8 --dims 128/128 --steps 7 --impls triton flex \
    --rounds 1 --out "$RUN/draft_attention.json"
# 55 s: the MLA draft (Kimi-K2.5: 64 heads, q/k 192, v 128), same inputs for both
step draft-attention-mla 55 python3 benchmarks/draft_attention.py \
    --n 8192 --docs 1 16 --heads 64x64 --dims 192/128 --steps 7 --impls triton flex \
    --rounds 1 --out "$RUN/draft_attention_mla.json"
# 110 s: one training step at Kimi-K2.5 draft size, triton then
# simple_flex_attention (each compiles upstream's torch.compile'd forward first)
step draft-train-step 110 python3 benchmarks/draft_train_step.py --rounds 3 \
    --out "$RUN/draft_train_step.json"
# Opt-in, 240 s: peak memory of the --sp-size path at degree 1 for a Kimi-K2.5-size
# draft layer (3 and 7 TTT steps, 8K-64K tokens, sdpa inside the Ulysses
# wrapper); lengths left when 150 s of measuring have passed are skipped
if [[ " ${STEPS:-} " == *" sp-memory "* ]]; then
    step sp-memory 240 python3 benchmarks/sp_memory.py --device cuda \
        --deadline 150 --work "$RUN/sp_memory" --json "$RUN/sp_memory.json"
fi
# Opt-in, 240 s: the same for the MLA draft (Kimi-K2.5's: 64 heads, nope 128,
# rope 64, v 128, LoRA ranks 1536 / 512)
if [[ " ${STEPS:-} " == *" sp-memory-mla "* ]]; then
    step sp-memory-mla 240 python3 benchmarks/sp_memory.py --device cuda \
        --draft-arch deepseek_v3 --deadline 150 --work "$RUN/sp_memory_mla" \
        --json "$RUN/sp_memory_mla.json"
fi
echo "done at $((SECONDS - started))s; $failed failed step(s)"
exit "$failed"
