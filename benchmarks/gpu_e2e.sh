#!/usr/bin/env bash
# The GPU path's integration test: sdyn end to end through real Ray and a real SQLite MLflow
# store on a GPU machine, and the GPU's throughput against a baseline ref, in one command.
#
# For a lent GPU machine (one H100 or H200, Python 3.12 with CUDA torch, no Ray, MLflow or Hydra,
# no network), run from the repository root with the wheelhouse carried in .whl/, built on a
# machine that reaches PyPI by `python benchmarks/gpu_wheelhouse.py --baseline 15688a7`:
#
#   bash benchmarks/gpu_e2e.sh --commit HASH                       # every step, within 540 s
#   bash benchmarks/gpu_e2e.sh --only large --budget 560           # the large sweep alone
#   bash benchmarks/gpu_e2e.sh --quick --device cpu --no-install   # the commands, tiny, on a CPU
#
# Its steps (--only picks some, comma-separated), each bounded so that the later ones keep time,
# each skipped with under 30 s of the budget (--budget, 540 s) left:
# - install: .whl/*.whl into /tmp/site (pip --no-index --no-deps --target), put on PYTHONPATH
#   after the checkout (Ray's workers inherit it); the versions and the GPU are printed;
# - graphs: the test that the CUDA-graph step trains as the compiled step (at most 180 s: 90 s
#   were too few on a fresh H100, its compilations cold); if it fails, the later steps run
#   with SDYN_CUDA_GRAPHS=0 (and the exit status says so);
# - fused: the tests of the fused Triton step (SDYN_FUSED=1), compiled on the GPU: each
#   iteration as gd_iteration's, and training as the compiled step (at most 150 s; the
#   ahead-of-time compile test is left to the CPU); if they pass, graph-step times the fused
#   step too and main-fused runs;
# - main: the main job, `python -m sdyn.sweep +grid=width cluster.device=DEVICE` (at most
#   180 s; 62 s on an H100), timed by benchmarks/timed.py, its store a temporary folder's
#   mlflow.db;
# - main-cpu: the same sweep on the host's cores (cluster.device=cpu, a store of its own, at
#   most 120 s): the default width grid's training all on the GPU against the host's CPUs;
# - main-fused: the main job again with SDYN_FUSED=1 (at most 150 s, a store of its own);
# - graph-step: benchmarks/graph_step.py (at most 90 s, a GPU only): the CUDA-graph step
#   against the compiled step at n 256, m 4096 and at the large sweep's widest shape (and the
#   fused step with its default blocks and three others, at most 210 s then), and their share
#   of the card's binding limit; then
#   at n 256, m 4096 with SDYN_COMPILE=0 (at most 45 s): graphs of the eager step, with no
#   compilation to pay;
# - throughput: benchmarks/throughput.py --baseline .whl/baseline at n 256, m 4096 (at most
#   200 s): the naive loop, the baseline ref, this tree and the host CPU;
# - large: the large sweep's --plan, then the sweep, `--sweep ntk_width_large
#   cluster.device=DEVICE`, with the time left; a SIGINT stops it cleanly at the budget's end
#   (what finished stays recorded).
# Then, for each sweep's event log, benchmarks/bundle_times.py: per driver, the first bundle's
# time (a fresh worker's start, CUDA's context, compilation) apart from the others'.
#
# Writes under $OUT (the device tool's folder; outputs/gpu-e2e/ where it is unset), at most
# 9 files: e2e.log (everything printed, the large sweep's plan too), sweep-main.json,
# sweep-main-cpu.json, sweep-main-fused.json and sweep-large.json (timed.py's records),
# graph-step.json,
# graph-step-eager.json, throughput.json, reports.tar.gz (the sweeps' reports).
# Exit status: 2 for a bad argument, 3 if the install fails, else that of the first step that
# failed (7 graphs, 8 fused, 4 main, main-cpu or main-fused, 5 graph-step or throughput,
# 6 large; a large sweep stopped at the budget's end is none).
set -uo pipefail

DEVICE=cuda
BUDGET=540
QUICK=0
INSTALL=1
ONLY=install,graphs,fused,main,main-cpu,main-fused,graph-step,throughput,large
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --commit) export SDYN_COMMIT=$2; shift 2 ;;
    --only) ONLY=install,$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --no-install) INSTALL=0; shift ;;
    *) echo "gpu_e2e.sh: unknown argument $1 (--device D, --budget S, --commit H, --only STEPS, --quick, --no-install)" >&2
       exit 2 ;;
  esac
done
OUT=${OUT:-$PWD/outputs/gpu-e2e}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

if [ "$QUICK" = 1 ]; then  # the same commands on tiny grids: a check of this script on a CPU
  MAIN=(+grid=width 'grid.n=[8,16]' 'grid.widths=[16,64]' grid.seeds=2 experiment.steps=200)
  LARGE=(--sweep ntk_width_large 'grid.n=[8,16]' grid.width_max=64 grid.seeds=2 experiment.steps=200)
  CASES=ntk-small
else
  MAIN=(+grid=width)
  LARGE=(--sweep ntk_width_large)
  CASES=ntk-large
fi
STORE=$(mktemp -d)
QUIET=(sweep.yes=true sweep.progress=false)
SWEEP=(tracking.uri="sqlite:///$STORE/mlflow.db" "${QUIET[@]}")
START=$SECONDS
status=0
FUSED=()  # graph_step.py's fused variants, once the fused step's test passed

left() { echo $((BUDGET - (SECONDS - START))); }
at_most() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
# A step runs if --only names it and over 30 s are left (`timeout 0` would mean no limit).
wanted() {
  [[ ",$ONLY," == *",$1,"* ]] || return 1
  echo; echo "== $1 ($(left) s of $BUDGET left)"
  [ "$(left)" -gt 30 ] || { echo "skipped: under 30 s left"; return 1; }
}
failed() { [ "$status" = 0 ] && status=$1; }

run_all() {
  wanted install
  if [ "$INSTALL" = 1 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || return 3
    export PYTHONPATH=$PWD:/tmp/site
  else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  fi
  python3 -c 'import sys, torch, ray, mlflow, hydra, sdyn
print("python", sys.version.split()[0], "| torch", torch.__version__, "| ray", ray.__version__,
      "| mlflow", mlflow.__version__, "| hydra", hydra.__version__, "| sdyn", sdyn.__file__)
print("GPU:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")' || return 3
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null

  if wanted graphs; then
    timeout --kill-after=15 "$(at_most 180)" python3 -m pytest -q -o addopts= -p no:cacheprovider \
      tests/test_ntk.py -k cuda_graph_step || { failed 7; export SDYN_CUDA_GRAPHS=0; }
  fi
  if [ "$DEVICE" = cuda ] && wanted fused; then
    python3 -c 'import triton; print("triton", triton.__version__)'
    timeout --kill-after=15 "$(at_most 150)" python3 -m pytest -q -o addopts= -p no:cacheprovider \
      tests/test_fused_step.py tests/test_ntk.py -k "fused and not compile" \
      && FUSED=(--fused --fused-blocks 64x64x512x64x16x4,128x64x512x64x64x8,32x64x256x32x32x2) \
      || failed 8
  fi
  if wanted main; then
    timeout --signal=INT --kill-after=30 "$(at_most 180)" \
      python3 benchmarks/timed.py sweep --out "$OUT/sweep-main.json" -- \
      python3 -m sdyn.sweep "${MAIN[@]}" "${SWEEP[@]}" cluster.device="$DEVICE" || failed 4
  fi
  if wanted main-cpu; then
    timeout --signal=INT --kill-after=30 "$(at_most 120)" \
      python3 benchmarks/timed.py sweep --out "$OUT/sweep-main-cpu.json" -- \
      python3 -m sdyn.sweep "${MAIN[@]}" tracking.uri="sqlite:///$STORE/mlflow-cpu.db" \
      "${QUIET[@]}" cluster.device=cpu || failed 4
  fi
  if [ ${#FUSED[@]} -gt 0 ] && wanted main-fused; then
    SDYN_FUSED=1 timeout --signal=INT --kill-after=30 "$(at_most 150)" \
      python3 benchmarks/timed.py sweep --out "$OUT/sweep-main-fused.json" -- \
      python3 -m sdyn.sweep "${MAIN[@]}" tracking.uri="sqlite:///$STORE/mlflow-fused.db" \
      "${QUIET[@]}" cluster.device="$DEVICE" || failed 4
  fi
  if [ "$DEVICE" = cuda ] && wanted graph-step; then
    timeout --kill-after=15 "$(at_most $(( ${#FUSED[@]} ? 210 : 90 )))" \
      python3 benchmarks/graph_step.py "${FUSED[@]}" --out "$OUT/graph-step.json" || failed 5
    SDYN_COMPILE=0 timeout --kill-after=15 "$(at_most 45)" python3 benchmarks/graph_step.py \
      --cases ntk-large --out "$OUT/graph-step-eager.json" || failed 5
  fi
  if wanted throughput; then
    timeout --kill-after=30 "$(at_most 200)" \
      python3 benchmarks/throughput.py --quick --cases "$CASES" --baseline .whl/baseline \
      --out "$OUT/throughput.json" || failed 5
  fi
  if wanted large; then
    timeout --kill-after=15 "$(at_most 60)" \
      python3 -m sdyn.sweep "${LARGE[@]}" "${SWEEP[@]}" cluster.device="$DEVICE" --plan
    timeout --signal=INT --kill-after=30 "$(( $(left) - 15 ))" \
      python3 benchmarks/timed.py sweep --out "$OUT/sweep-large.json" -- \
      python3 -m sdyn.sweep "${LARGE[@]}" "${SWEEP[@]}" cluster.device="$DEVICE"
    case $? in 0 | 124 | 130) ;; *) failed 6 ;; esac
  fi
  echo; echo "== bundle times (benchmarks/bundle_times.py)"
  for log in outputs/*/events.jsonl; do
    [ -e "$log" ] && python3 benchmarks/bundle_times.py "$log"
  done
  tar -czf "$OUT/reports.tar.gz" --exclude=outputs/gpu-e2e outputs 2>/dev/null
  ls -l "$OUT"
  echo "gpu_e2e.sh: exit status $status after $((SECONDS - START)) s"
  return "$status"
}

run_all 2>&1 | tee "$OUT/e2e.log"
exit "${PIPESTATUS[0]}"
