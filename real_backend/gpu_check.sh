#!/usr/bin/env bash
# GPU check of the real backend, in under 5 minutes, everything written to one folder.
#
#   real_backend/gpu_check.sh [OUT_DIR]              (default: $OUT if set, else results/gpu_check)
#   KIT=$PWD/gpu-kit/site real_backend/gpu_check.sh  (flexcomm and what the device image lacks, installed from
#                                                     the GPU kit: see gpu-kit/INSTALL.txt, `make gpu-kit`)
#   real_backend/gpu_check.sh --rehearse [OUT_DIR]   (here, on the CPU: every step with gloo and CPU tensors,
#                                                     in a fresh venv holding torch from this disk, the image's
#                                                     other packages and the kit installed with --no-index)
#
# On a CUDA machine (checked first: nvidia-smi, then torch.cuda.is_available()):
#   1. the NCCL collective benchmark on every GPU present (bench-collectives --backend nccl,
#      nproc = GPU count, sizes 1MiB:256MiB) -> nccl_collectives.csv (+ nccl_profile.json with >= 2 GPUs),
#      the same runs as nccl-tests logs (nccl-tests/*.txt) and, with >= 2 GPUs, each log predicted by the
#      NCCL-grade model (validate --nccl-tests, cluster: $GPU_CLUSTER or one DGX H100 node of NGPU GPUs)
#      -> nccl-tests/*.validation.json, and those logs fitting the cluster's NCCL model (calibrate --cluster)
#      -> nccl-tests/calibration.yaml;
#   2. the DDP communication hooks on a small model under NCCL, overlapping backward (train-ddp: builtin,
#      dense, fp16, topk-ag, topk-ar, powersgd, flexible, moo) -> ddp/<strategy>/{steps,exchanges}.csv,
#      summary.json; and dense blocking (--no-overlap) for the overlap's gain -> ddp-blocking/;
#   3. Top-k selection and compressor timings on the GPU (experiments/commands/gpu_topk.py;
#      benchmarks/bench_topk.py has no --device flag) -> topk.json;
#   4. the compute model on one GPU (experiments/commands/gpu_compute.py): the planner's transformer GEMMs (bf16,
#      CUDA events), one layer's forward+backward, Top-k / threshold / PowerSGD / fp16 kernels and each
#      workload's step, against what the engines predict for the catalog's device -> gpu_compute.csv (the
#      validation/gpu-compute/ corpus's form: copy it there and `flexcomm validate --gpu-compute` reports it);
#   5. report.md: all of it as one page to paste into the README (real_backend/gpu_report.py).
# Each step has its own time limit; a failed step is recorded in status.txt and the others still run.
# Exit status: 0 all steps passed, 1 some step failed, 2 --rehearse without a built kit, 69 (EX_UNAVAILABLE)
# no CUDA here: nothing was run.
# The Python used: $PYTHON, else .venv/bin/python if its torch sees CUDA, else python3. flexcomm is imported
# from $KIT when set (the kit installed with --target), else from that Python's installed packages.
set -u -o pipefail

EXIT_NO_CUDA=69
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
REHEARSE=0
if [ "${1:-}" = "--rehearse" ]; then
    REHEARSE=1
    shift
fi
OUT_DIR=${1:-${OUT:-results/gpu_check}}

no_cuda() {
    echo "gpu_check: no CUDA: $1; this check needs an NVIDIA GPU with a CUDA build of torch (nothing was run)" >&2
    exit "$EXIT_NO_CUDA"
}

if [ "$REHEARSE" -eq 1 ]; then
    # the device's conditions on the CPU: a fresh venv of this machine's Python, torch from this disk, the
    # image's packages flexcomm needs, then only the kit (--no-index --no-deps), no checkout on the path
    GPU_KIT=${GPU_KIT:-gpu-kit}
    if [ ! -f "$GPU_KIT/manifest.json" ] || [ ! -d "$GPU_KIT/rehearse" ]; then
        echo "gpu_check: --rehearse needs the GPU kit: run make gpu-kit first" >&2
        exit 2
    fi
    mkdir -p "$OUT_DIR"
    VENV="$OUT_DIR/rehearse-venv"
    KIT="$OUT_DIR/rehearse-kit"
    rm -rf "$VENV" "$KIT"
    BASE_PYTHON=${REHEARSE_PYTHON:-python3.11}
    "$BASE_PYTHON" -m venv "$VENV" || exit 1
    "$VENV/bin/python" -m pip install --quiet --no-deps /opt/wheels/torch-*cp311*.whl || exit 1
    # what the image has that flexcomm imports (their versions here are the image's or close to them)
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $("$ROOT/.venv/bin/python" \
        -m flexcomm.experiments.commands.gpu_kit --print-image-needs) || exit 1
    # the kit: pure wheels as built for the device, binary ones for this Python at the same versions
    wheels=()
    for wheel in "$GPU_KIT"/wheels/*.whl; do
        case "$wheel" in *-none-any.whl) wheels+=("$wheel") ;; esac
    done
    "$VENV/bin/python" -m pip install --quiet --no-index --no-deps --target "$KIT" "${wheels[@]}" \
        "$GPU_KIT"/rehearse/*.whl || exit 1
    PYTHON="$VENV/bin/python"
    BACKEND=gloo
    DEVICE=cpu
    NGPU=2
    echo "gpu_check: REHEARSAL on the CPU (gloo, $NGPU ranks), kit installed into $KIT"
else
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        no_cuda "nvidia-smi not found"
    fi
    if ! nvidia-smi -L >/dev/null 2>&1; then
        no_cuda "nvidia-smi finds no GPU or no driver"
    fi
    BACKEND=nccl
    DEVICE=cuda
fi

cuda_count() {  # prints the CUDA device count torch sees with interpreter $1 (0 if none or no torch)
    "$1" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0
}
PY=${PYTHON:-}
if [ "$REHEARSE" -eq 0 ]; then
    if [ -z "$PY" ]; then
        for candidate in .venv/bin/python python3; do
            if command -v "$candidate" >/dev/null 2>&1 && [ "$(cuda_count "$candidate")" -gt 0 ]; then
                PY=$candidate
                break
            fi
        done
    fi
    [ -n "$PY" ] || no_cuda "torch.cuda.is_available() is False for .venv/bin/python and python3 (a CPU-only torch build?)"
    NGPU=$(cuda_count "$PY")
    [ "$NGPU" -gt 0 ] || no_cuda "torch.cuda.is_available() is False for $PY"
fi
if [ -n "${KIT:-}" ]; then
    # the kit's flexcomm, not the checkout's flexcomm/ folder (the public API alone), which Python would put
    # first from the working directory: PYTHONSAFEPATH (3.11+) keeps the working directory off sys.path
    export PYTHONPATH
    PYTHONPATH=$(cd "$KIT" && pwd)
    export PYTHONSAFEPATH=1
fi
if ! "$PY" -c 'import flexcomm.experiments.cli' 2>/dev/null; then
    echo "gpu_check: $PY cannot import flexcomm: install the GPU kit (make gpu-kit; gpu-kit/INSTALL.txt) and set KIT" >&2
    "$PY" -c 'import flexcomm.experiments.cli' 2>&1 | tail -n 1 >&2
    exit 1
fi

mkdir -p "$OUT_DIR/logs"
STATUS="$OUT_DIR/status.txt"
: > "$STATUS"
{
    echo "date: $(date -Is)"
    echo "python: $PY"
    echo "mode: $([ "$REHEARSE" -eq 1 ] && echo "rehearsal on the CPU (gloo)" || echo "GPU ($BACKEND)")"
    "$PY" -c 'import torch, flexcomm; print("torch", torch.__version__, "cuda", torch.version.cuda, "flexcomm from", flexcomm.__file__)'
    if [ "$REHEARSE" -eq 0 ]; then
        "$PY" -c 'import torch; print("nccl", torch.cuda.nccl.version())'
        nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    fi
} > "$OUT_DIR/environment.txt" 2>&1
echo "gpu_check: $NGPU $([ "$REHEARSE" -eq 1 ] && echo "CPU ranks" || echo "GPU(s)"), python $PY, results in $OUT_DIR"

failed=0
step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log, record the status
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "gpu_check: $name ..."
    timeout --kill-after=10 "$limit" "$@" > "$OUT_DIR/logs/$name.log" 2>&1
    local rc=$?
    echo "$name exit=$rc seconds=$((SECONDS - start))" >> "$STATUS"
    if [ "$rc" -ne 0 ]; then
        failed=1
        echo "gpu_check: $name FAILED (exit $rc), see $OUT_DIR/logs/$name.log" >&2
        tail -n 5 "$OUT_DIR/logs/$name.log" >&2
    fi
    return 0
}

rm -f "$OUT_DIR/nccl_collectives.csv"
step nccl-bench 150 "$PY" -m flexcomm.experiments.cli bench-collectives --backend "$BACKEND" --nproc "$NGPU" \
    --sizes 1MiB:256MiB --collectives allreduce,allgather,broadcast,reduce-scatter --warmup 3 --iters 10 \
    --out "$OUT_DIR/nccl_collectives.csv" --timeout 140s --op-timeout 60s --log-dir "$OUT_DIR/logs/nccl-bench" \
    --nccl-tests-dir "$OUT_DIR/nccl-tests"
if [ "$NGPU" -ge 2 ] && [ -s "$OUT_DIR/nccl_collectives.csv" ]; then
    step nccl-calibrate 30 "$PY" -m flexcomm.experiments.cli calibrate "$OUT_DIR/nccl_collectives.csv" \
        -o "$OUT_DIR/nccl_profile.json"
fi
# The same runs as nccl-tests logs, predicted by the NCCL-grade model from a description of this machine:
# $GPU_CLUSTER if given (a cluster file), else one node of the shipped DGX H100 with this many GPUs (H100 and
# H200 share NVLink 4 / NVSwitch; edit the written cluster.yaml for other hardware). Logs and cluster file
# go into the corpus as validation/nccl-tests/<run>.txt and clusters/<run>.yaml.
if [ "$NGPU" -ge 2 ] && [ -d "$OUT_DIR/nccl-tests" ]; then
    CLUSTER_FILE=${GPU_CLUSTER:-$OUT_DIR/nccl-tests/cluster.yaml}
    if [ -z "${GPU_CLUSTER:-}" ]; then
        gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
        printf '%s\n' "# written by gpu_check.sh: ${gpu_name:-no GPU (a rehearsal on the CPU)}" \
            "extends: dgx-h100" "name: gpu-check" "nodes: 1" "devices_per_node: $NGPU" > "$CLUSTER_FILE"
    fi
    for log in "$OUT_DIR"/nccl-tests/*.txt; do
        [ -e "$log" ] || continue
        name=$(basename "$log" .txt)
        step "nccl-validate-$name" 30 sh -c '"$1" -m flexcomm.experiments.cli validate --nccl-tests "$2" \
            --cluster "$3" --json > "$4"' _ "$PY" "$log" "$CLUSTER_FILE" "$OUT_DIR/nccl-tests/$name.validation.json"
    done
    # the same logs teach the cluster's NCCL model this machine (calibrate --cluster, as a user's own runs would)
    step nccl-calibrate-fabric 30 sh -c '"$1" -m flexcomm.experiments.cli calibrate --cluster "$2" "$3"/*.txt \
        -o "$3/calibration.yaml"' _ "$PY" "$CLUSTER_FILE" "$OUT_DIR/nccl-tests"
fi

step ddp-hooks 100 "$PY" -m flexcomm.experiments.cli train-ddp --backend "$BACKEND" --nproc "$NGPU" --workload mlp-digits \
    --hidden 2048,2048 --strategy builtin,dense,fp16,topk-ag@0.01,topk-ar@0.01,powersgd,flexible@0.01,moo \
    --steps 15 --out "$OUT_DIR/ddp" --timeout 95s --op-timeout 30s --log-dir "$OUT_DIR/logs/ddp-hooks"
step ddp-blocking 40 "$PY" -m flexcomm.experiments.cli train-ddp --backend "$BACKEND" --nproc "$NGPU" \
    --workload mlp-digits --hidden 2048,2048 --strategy builtin,dense --steps 15 --no-overlap \
    --out "$OUT_DIR/ddp-blocking" --timeout 35s --op-timeout 30s --log-dir "$OUT_DIR/logs/ddp-blocking"

step gpu-topk 60 "$PY" -m flexcomm.experiments.commands.gpu_topk --device "$DEVICE" --repeats 10 \
    --out "$OUT_DIR/topk.json"
if [ "$REHEARSE" -eq 1 ]; then
    step gpu-compute 120 "$PY" -m flexcomm.experiments.commands.gpu_compute --device cpu --quick --repeats 3 \
        --out "$OUT_DIR/gpu_compute.csv"
else
    step gpu-compute 150 "$PY" -m flexcomm.experiments.commands.gpu_compute --device cuda --repeats 20 \
        --out "$OUT_DIR/gpu_compute.csv"
fi
step report 20 "$PY" -m flexcomm.real_backend.gpu_report "$OUT_DIR"

echo "gpu_check: done in ${SECONDS}s; $(tr '\n' ';' < "$STATUS")"
exit "$failed"
