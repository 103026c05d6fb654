#!/usr/bin/env bash
# One call on the GPU machine (docs/gpu.md), after `source .cutedsl/activate.sh`:
#
#   bash scripts/device_run.sh COMMIT STEP [ARG...] [-- STEP [ARG...]]...
#
# Each STEP runs its command with the step's default arguments, or with the ARGs given after it
# instead (up to the next `--`). A first ARG `--limit S` bounds the step to S seconds. Steps:
#   check        every GPU test + the demo: gpu-check.json (scripts/gpu_check.py)
#   tests        every GPU test (pytest -m gpu); ARGs: pytest's (test files given: those alone)
#   copytests / generic / mctests   a GPU test file (or files); ARGs: pytest's (e.g. -k NAME)
#   sweep        the 200-configuration verification (tmakit verify --sweep)
#   bench pipebench seedbench floor prefetchbench rowbench   tmakit bench studies
#   copybench transposebench reducebench   tmakit bench --kernel copy|transpose|reduce; ARGs: bench's
#                (e.g. --copy stages=4 --sizes 1,16 --specialised; --reduce add:fp32 --copy default)
#   clusterbench one `tmakit bench --cluster C` per cluster; ARGs: clusters, then bench's after `:`
#                (e.g. 1x2 2x2 : --hot-l2 --persistent-clusters auto)
#   dotbench im2colbench   tmakit bench --kernel cluster-dot / im2col (the studies cluster-dot.json, im2col.json); ARGs: bench's
#   dropinbench  tmakit bench --kernel dropin (the study dropin.json); ARGs: bench's (e.g. --only copy,add)
#   rowsbench    tmakit bench --kernel rows (a part of rows.json); ARGs: bench's (e.g. --only gather); its
#                torch TMA scatter_add rows (--only torch) need .peers carried (scripts/fetch_peers.py,
#                here), else skipped
#   moebench     tmakit bench --kernel moe (the study moe.json); ARGs: bench's (e.g. --only dispatch; --only
#                layer: forward and backward); its TransformerEngine rows need .peers carried, else skipped
#   moerouting   benchmarks/probes/moe_routing.py: the routing kernels against torch's, checked, then timed
#   moerings     benchmarks/probes/moe_combine_rings.py: the combine's ring shapes beside TransformerEngine's unpermute
#   moehost      benchmarks/probes/moe_host.py: an eager MoE call's host time by part, and cProfile
#   enablemodels benchmarks/probes/enable_models.py: four models with and without tmakit.enable()
#                (enable-models.json); ARGs: the script's (e.g. --rounds 10)
#   smbudget     benchmarks/probes/sm_budget.py: the rate against the SM count (sms=) beside torch's op in a
#                green context, and a budgeted copy beside a bf16 GEMM (sm-budget.json); ARGs: the script's
#   manybench    tmakit bench --kernel many (many.json, part lists); ARGs: bench's (e.g. --only pack)
#   abbench      scripts/ab_bench.py: this tree against another's, every family's device time and each public
#                call's host cost (ab-bench.json); ARGs: the base (its src/ folder, e.g. a carried .ab-base/src,
#                or its commit where git is at hand), then the script's (e.g. --base-commit C --only rows,many)
#   mctimeline   scripts/multicast_timeline.py; ARGs: theirs (--clusters, --protocols, --stages, --walks)
#   ncu mcncu copyncu ncugeneric   Nsight Compute (scripts/ncu_profile.py, ncu_generic.py); ARGs: theirs
#   ceiling      benchmarks/probes/dram_ceiling.py; ARGs: theirs (e.g. --ncu PREFIXES)
#   edges        benchmarks/probes/gpu_edges.py; ARGs: theirs (e.g. --only PREFIX)
#   copydefaults benchmarks/probes/copy_defaults.py: the copy's and rows' defaults no committed results
#                hold, each swept around its value (copy-defaults.json); ARGs: theirs (e.g. --only GROUP)
#   manystages   benchmarks/probes/many_stages.py: the grouped copy's ring shapes on a layer (many.json, part stages); ARGs: theirs
#   sanitize     compute-sanitizer racecheck, memcheck and synccheck on a grouped copy of 100 tensors
#                (benchmarks/probes/sanitize_many.py); ARGs: the script's (e.g. --count 300)
#   hostcost     host us per copy call and its parts, and per add_/im2col/load_tiles call, beside torch (host-cost.json, part calls)
#   oppath       benchmarks/probes/op_path_probe.py: the ops' host time against their direct calls and the dispatcher's floor (host-cost.json, part dispatch)
#   copyroute    benchmarks/probes/copy_route_probe.py: large copies (same layout and transposing) by TMA with its options, the grouped copy, memcpy, torch's element-wise kernel and inductor, eager and in graphs (copy.json, part route)
#   allgather    benchmarks/probes/allgather_pack.py under torchrun (NCCL): pack/unpack as an all-gather's and a
#                reduce-scatter's copy-in and copy-out; ARGs: the processes (one a GPU), then the script's
#                (e.g. 2 --samples 20) (many.json, part allgather)
# Everything lands in $OUT, packed into one results-COMMIT.tgz (the tool brings back few files). A step
# that makes one part of a study writes $OUT/STUDY/PART.json and, beside it, $OUT/STUDY.json: the
# committed file with that part replaced (scripts/results_part.py).
set -uo pipefail
commit=$1; shift
export TMAKIT_COMMIT=$commit
final_out=$OUT
export OUT=$final_out/work
mkdir -p "$OUT"
trap 'tar -czf "$final_out/results-$commit.tgz" -C "$OUT" . && rm -rf "$OUT"' EXIT
if ls .whl/*.whl >/dev/null 2>&1; then  # optional wheels (apache-tvm-ffi for the TVM-FFI launch path)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH="${PYTHONPATH:-}:/tmp/site"
fi
bench=(python3 -m tmakit bench --commit "$commit")

# part STUDY KEY: the step's $OUT/STUDY/KEY.json as part KEY of $OUT/STUDY.json, the committed
# file's other parts kept (a study's angles are one file: benchmarks/README.md).
part() { [ -f "$OUT/$1/$2.json" ] && python3 scripts/results_part.py "$1" "$2" "$OUT/$1/$2.json" --out "$OUT"; }

# run_step NAME LIMIT ARG...: the step's command, its ARGs (the defaults when none were given).
run_step() {
  local step=$1 limit=$2; shift 2
  case $step in
    check) timeout "$limit" python3 scripts/gpu_check.py --commit "$commit" --out "$OUT" "$@" 2>&1 | tail -5 ;;
    tests) timeout "$limit" python3 -m pytest -q -m gpu "$@" 2>&1 | tail -25 | tee "$OUT/gpu-tests.log" ;;  # no file given: testpaths (tests/)
    copytests) timeout "$limit" python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_copy.py "$@" 2>&1 | tail -30 | tee "$OUT/gpu-copy-tests.log" ;;
    generic) timeout "$limit" python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_generic.py tests/test_gpu_copy.py "$@" 2>&1 | tail -40 | tee "$OUT/gpu-generic-tests.log" ;;
    mctests) timeout "$limit" python3 -m pytest -q -p no:cacheprovider tests/test_gpu_multicast.py "$@" 2>&1 | tail -15 | tee "$OUT/gpu-multicast-tests.log" ;;
    sweep) timeout "$limit" python3 -m tmakit verify --sweep 200 --seed 2026 --timeout 60 --json "$OUT/sweep.json" "$@" 2>&1 | grep -v "━" | tail -15 ;;
    bench) timeout "$limit" "${bench[@]}" --ncu --json "$OUT/bench.json" --plot "$OUT/bench.png" "$@" 2>&1 | tee "$OUT/bench.log" | tail -40 ;;
    pipebench) timeout "$limit" "${bench[@]}" --shape "" --sizes 1024 --json "$OUT/bench-pipeline.json" "$@" 2>&1 | tee "$OUT/bench-pipeline.log" | tail -45 ;;
    rowbench) timeout "$limit" "${bench[@]}" --shape "" --sizes 1024 --json "$OUT/bench-rowsum.json" "$@" 2>&1 | tee "$OUT/bench-rowsum.log" | tail -25 ;;
    prefetchbench) timeout "$limit" "${bench[@]}" --sizes "" --json "$OUT/bench-prefetch.json" "$@" 2>&1 | tail -4 ;;
    seedbench) for tile in 64x128 32x256; do
        timeout "$limit" "${bench[@]}" --sizes "" --tile $tile --json "$OUT/bench-seed-$tile.json" "$@" 2>&1 | tail -3
      done ;;
    floor) for shape in 8448x1792 64x256 1024x1792; do  # the seed shape beside tiny ones: the fixed cost
        timeout "$limit" "${bench[@]}" --sizes "" --shape $shape --json "$OUT/bench-floor-$shape.json" "$@" 2>&1 | tail -8
      done ;;
    copybench|transposebench|reducebench)
      local kernel=${step%bench}
      timeout "$limit" "${bench[@]}" --kernel "$kernel" --shape "" --json "$OUT/bench-$kernel.json" --plot "$OUT/bench-$kernel.png" "$@" 2>&1 | tail -70 ;;
    clusterbench)  # clusters, then `:` and bench's arguments for each
      local clusters=() options=()
      while [ $# -gt 0 ] && [ "$1" != ":" ]; do clusters+=("$1"); shift; done
      [ $# -gt 0 ] && shift && options=("$@")
      for cluster in "${clusters[@]}"; do
        timeout "$limit" "${bench[@]}" --sizes "" --cluster "$cluster" --json "$OUT/bench-cluster-$cluster.json" "${options[@]}" 2>&1 | tail -6
      done ;;
    dotbench) timeout "$limit" "${bench[@]}" --kernel cluster-dot --samples 30 --json "$OUT/cluster-dot.json" "$@" 2>&1 | tail -20 ;;
    im2colbench) timeout "$limit" "${bench[@]}" --kernel im2col --samples 30 --json "$OUT/im2col.json" "$@" 2>&1 | tail -12 ;;
    dropinbench) timeout "$limit" "${bench[@]}" --kernel dropin --samples 30 --json "$OUT/dropin.json" "$@" 2>&1 | tail -40 ;;
    rowsbench) timeout "$limit" "${bench[@]}" --kernel rows --samples 30 --json "$OUT/bench-rows.json" "$@" 2>&1 | tail -45 ;;
    moebench) timeout "$limit" "${bench[@]}" --kernel moe --samples 30 --json "$OUT/moe.json" "$@" 2>&1 | tee "$OUT/moe.log" | tail -60 ;;
    moerouting) timeout "$limit" python3 benchmarks/probes/moe_routing.py --out "$OUT/moe-routing.json" "$@" 2>&1 | tail -20 ;;
    moerings) timeout "$limit" python3 benchmarks/probes/moe_combine_rings.py --out "$OUT/moe-combine-rings.json" "$@" 2>&1 | tail -30 ;;
    enablemodels) timeout "$limit" python3 benchmarks/probes/enable_models.py --out "$OUT/enable-models.json" "$@" 2>&1 | tail -12 ;;
    smbudget) timeout "$limit" python3 benchmarks/probes/sm_budget.py --json "$OUT/sm-budget.json" "$@" 2>&1 | tail -40
      python3 scripts/plot_sm_budget.py "$OUT/sm-budget.json" "$OUT/sm-budget.svg" ;;
    moehost) timeout "$limit" python3 benchmarks/probes/moe_host.py "$@" > "$OUT/moe-host.txt" 2>&1; grep -v "^$" "$OUT/moe-host.txt" | head -16 ;;
    allgather) local nproc=$1; shift
      mkdir -p "$OUT/many"
      timeout "$limit" python3 -m torch.distributed.run --nproc-per-node "$nproc" benchmarks/probes/allgather_pack.py --json "$OUT/many/allgather.json" "$@" 2>&1 | tail -8
      part many allgather ;;
    manystages) timeout "$limit" python3 benchmarks/probes/many_stages.py --json "$OUT/many/stages.json" "$@" 2>&1 | tail -20; part many stages ;;
    manybench) mkdir -p "$OUT/many"
      timeout "$limit" "${bench[@]}" --kernel many --samples 20 --json "$OUT/many/lists.json" "$@" 2>&1 | tail -30; part many lists ;;
    abbench) [ $# -gt 0 ] || { echo "device_run: abbench needs the base tree's src/ or commit" >&2; return 2; }
      local base=$1; shift
      if [ ! -d "$base" ]; then  # a commit: its src/ out of git
        local tree; tree=$(mktemp -d) && git archive "$base" src | tar x -C "$tree" || return 2
        set -- --base-commit "$base" "$@"; base=$tree/src
      fi
      timeout "$limit" python3 scripts/ab_bench.py "$base" --commit "$commit" --json "$OUT/ab-bench.json" "$@" 2>&1 | tee "$OUT/ab-bench.log" | tail -45 ;;
    mctimeline) timeout "$limit" python3 scripts/multicast_timeline.py --out "$OUT/mctimeline" --commit "$commit" "$@" 2>&1 | tee "$OUT/mctimeline.log" | tail -30 ;;
    ncu) timeout "$limit" python3 scripts/ncu_profile.py --out "$OUT" "$@" 2>&1 | tail -20 ;;
    mcncu) ncu --query-metrics --chip gh100 > "$OUT/ncu-query-metrics-gh100.txt" 2>&1
      timeout "$limit" python3 scripts/ncu_profile.py --out "$OUT" "$@" 2>&1 | tail -20 ;;
    copyncu) timeout "$limit" python3 scripts/ncu_profile.py --out "$OUT/copyncu" "$@" 2>&1 | tail -8 ;;
    ncugeneric) timeout "$limit" python3 scripts/ncu_generic.py --commit "$commit" --out "$OUT" "$@" 2>&1 | tail -5 ;;
    ceiling) timeout "$limit" python3 benchmarks/probes/dram_ceiling.py --out "$OUT/ceiling" "$@" 2>&1 | tail -30 ;;
    copydefaults) timeout "$limit" python3 benchmarks/probes/copy_defaults.py --out "$OUT/copy-defaults.json" "$@" 2>&1 | tail -40 ;;
    edges) timeout "$limit" python3 benchmarks/probes/gpu_edges.py --commit "$commit" --out "$OUT" "$@" 2>&1 | tail -12 ;;
    sanitize) for tool in racecheck memcheck synccheck; do  # a hazard or error exits 1, logged
        timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 20 \
          python3 benchmarks/probes/sanitize_many.py "$@" > "$OUT/sanitize-$tool.log" 2>&1
        echo "exit status $?" >> "$OUT/sanitize-$tool.log"; tail -12 "$OUT/sanitize-$tool.log"
      done ;;
    oppath) mkdir -p "$OUT/host-cost"
      timeout "$limit" python3 benchmarks/probes/op_path_probe.py --commit "$commit" --json "$OUT/host-cost/dispatch.json" "$@" 2>&1 | tail -40
      part host-cost dispatch ;;
    copyroute) mkdir -p "$OUT/copy"
      timeout "$limit" python3 benchmarks/probes/copy_route_probe.py --commit "$commit" --json "$OUT/copy/route.json" "$@" 2>&1 | tail -12
      part copy route ;;
    hostcost) mkdir -p "$OUT/host-cost"
      timeout "$limit" python3 -c "import json, sys; from tmakit.bench import hostcost; r = hostcost.host_cost_report(sys.argv[1]); json.dump(r, open(sys.argv[2], 'w'), indent=1); print(json.dumps(r)[-1800:])" "$commit" "$OUT/host-cost/calls.json" 2> "$OUT/host-cost-stderr.log" | tail -8; tail -3 "$OUT/host-cost-stderr.log"
      part host-cost calls ;;
    *) echo "device_run: unknown step $step" >&2; return 2 ;;
  esac
}

# The defaults of a step given no ARGs (what the committed studies were run with).
defaults() {
  case $1 in
    pipebench) echo --pipeline stages=4 --pipeline stages=7 --pipeline stages=4,persistent --pipeline stages=7,persistent --pipeline stages=4,consumer_warps=2,persistent ;;
    rowbench) echo --pipeline stages=7 --pipeline stages=7,consumer_warps=4,consumer=rowsum --pipeline stages=4,consumer_warps=4,consumer=rowsum --pipeline stages=7,consumer_warps=2,consumer=rowsum --pipeline stages=4,consumer_warps=8,consumer=rowsum --pipeline stages=4,consumer_warps=4,persistent,consumer=rowsum ;;
    prefetchbench) echo --pipeline stages=1 --pipeline stages=2 --pipeline stages=4 --pipeline stages=7 --prefetch 2 ;;
    seedbench) echo --pipeline stages=4 --pipeline stages=4,persistent --pipeline stages=7,persistent --pipeline stages=4,consumer_warps=2,persistent ;;
    floor) echo --pipeline stages=7 --pipeline stages=4,prefetch_tiles=2,prefetch_descriptor --pipeline stages=7,prefetch_descriptor ;;
    copybench) echo --copy stages=4 --copy stages=6 --sizes 1,16,256,1024,2048 ;;
    transposebench) echo --copy stages=4 --sizes 16,256,1024 ;;
    reducebench) echo --sizes 16,64,256,1024 ;;
    clusterbench) echo 1x2 2x1 2x2 1x4 ;;
    mctimeline) echo --clusters 1x2,2x2 --stages 4,7 --walks strip ;;
    mcncu) echo --only multicast-1x2,multicast-1x4 --extra --sections ;;
    copyncu) echo --only copy- ;;
    allgather) echo 2 ;;
  esac
}

limit_of() {
  case $1 in
    check|sweep|ncu|ceiling|edges|mctimeline|reducebench|abbench) echo 420 ;;
    floor|seedbench|clusterbench) echo 120 ;;
    moebench) echo 540 ;;  # each shape compiles tmakit's kernels, inductor's and Triton's autotuned ones
    *) echo 300 ;;
  esac
}

status=0
while [ $# -gt 0 ]; do
  step=$1; shift
  args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift  # the `--` before the next step
  limit=$(limit_of "$step")
  if [ ${#args[@]} -ge 2 ] && [ "${args[0]}" = "--limit" ]; then limit=${args[1]}; args=("${args[@]:2}"); fi
  if [ ${#args[@]} -eq 0 ]; then read -r -a args <<< "$(defaults "$step")"; fi
  run_step "$step" "$limit" "${args[@]}" || status=$?
done
exit $status
