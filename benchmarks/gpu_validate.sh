#!/usr/bin/env bash
# One prepared GPU validation run (issue 26): the opt-in GPU test group, then what only a GPU can show -- check and
# bench on NCCL, TF32 forced as NVIDIA's containers force it, memory predicted against measured, tokens/s and MFU
# per strategy -- written to docs/gpu-results.md by benchmarks/gpu_report.py.
#
#   benchmarks/gpu_validate.sh [RESULTS.md]        # default: docs/gpu-results.md; raw outputs kept in a temp folder
#
# Budget: 8 minutes in all (BUDGET_S=480). Each step has its own timeout, cut to what is left of the budget; a step
# that overruns is recorded as a timeout and the script goes on; a step with under 20 s left is recorded as not run.
# World size = the visible GPU count. With one GPU, the 2-rank cases it allows: 2 CPU ranks beside it (the send/recv
# ring and the ddp stage on gloo), and 2 NCCL ranks on one GPU, which preflight must refuse (Duplicate GPU).
# Without a GPU it says so in one line, exit 2, and writes nothing.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${1:-docs/gpu-results.md}
PY=${PYTHON:-python}
BUDGET_S=${BUDGET_S:-480}
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export NO_COLOR=1 COLUMNS=200

GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null)
if [[ -z "$GPUS" || "$GPUS" == 0 ]]; then
    echo "gpu_validate: no CUDA GPU visible to torch here: run it on a GPU machine (nothing written)" >&2
    exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ddplab-gpu-validate.XXXXXX")
START=$SECONDS
printf 'name\trc\tseconds\tlimit\n' > "$WORK/steps.tsv"

# step NAME LIMIT_S CMD...: stdout to NAME.out, stderr to NAME.err, one line in steps.tsv (rc 124: timed out).
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET_S - (SECONDS - START)))
    if ((left < 20)); then
        printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >> "$WORK/steps.tsv"
        echo "gpu_validate: $name not run: the ${BUDGET_S}s budget is spent" >&2
        return
    fi
    ((limit > left)) && limit=$left
    echo "gpu_validate: $name (up to ${limit}s) ..." >&2
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
    local rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" >> "$WORK/steps.tsv"
}

ddplab() { "$PY" -m ddplab "$@"; }
# A gpt that fills a GPU for a few seconds: GPT-2 small (124M), bf16, 8 windows of 1024 per rank, 40 steps.
GPT=(gpt --size small --amp bf16 --batch-size 8 --stride 256 --max-steps 40 --log-every 10)

step env 30 ddplab env --json
# First, the whole opt-in group (check, bench, train ddp/zero1/fsdp, bf16/fp16, compile, resume); the figures after.
step gpu_tests 270 "$PY" -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider --junitxml="$WORK/gpu_tests.xml"
step check 120 ddplab check --json
step check_tf32 90 env TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 "$PY" -m ddplab check --json --stages devices,ddp
step check_cpu2 90 ddplab check --device cpu --nproc 2 --json
if ((GPUS == 1)); then
    step check_2on1 60 ddplab check --device cuda --nproc 2 --json  # must FAIL in preflight, exit 1
fi
step bench 120 ddplab bench -b 1K -e 1G -n 10 -w 3 --json
step memory 90 ddplab memory "${GPT[@]:0:9}" --nproc "$GPUS" --json
for strategy in ddp zero1 fsdp; do
    step "train_$strategy" 120 ddplab train "${GPT[@]}" --strategy "$strategy" \
        --checkpoint-dir "$WORK/ck_$strategy" --checkpoint-every 1000 --json
done

"$PY" benchmarks/gpu_report.py "$WORK" "$OUT" --gpus "$GPUS" --seconds $((SECONDS - START))
rc=$?
echo "gpu_validate: results in $OUT, raw outputs in $WORK ($((SECONDS - START)) s)" >&2
exit $rc
