#!/usr/bin/env bash
# One call on the GPU machine (see docs/gpu.md), after `source .cutedsl/activate.sh`:
#   bash scripts/device_run.sh COMMIT STEP...     steps: tests sweep bench pipebench seedbench copybench
#   transposebench reducebench copytests rowbench floor clusterbench prefetchbench check ncu mcncu copyncu
#   ceiling (DRAM read/write/copy limits, scripts/dram_ceiling.py) hostcost (host us per copy call;
#   a profile of a fresh process's first copy in host-cost-stderr.log)
#   edges (scripts/gpu_edges.py: > 2^31 elements, > 4 GiB, the largest grid)
#   generic (the shape-generic kernels' GPU tests and the copy tests)
#   ncugeneric (scripts/ncu_generic.py: Nsight Compute, shape-generic against shape-specialised copies)
#   im2colbench (scripts/im2col_bench.py: tmakit.im2col against F.unfold + permute, ResNet-50 3x3 layers)
#   mctimeline (scripts/multicast_timeline.py: the multicast ring's per-stage timeline and times, each
#   release protocol and CUTLASS's PipelineTmaAsync, with and without multicast; TMAKIT_MC_CLUSTERS,
#   TMAKIT_MC_PROTOCOLS, TMAKIT_MC_STAGES, TMAKIT_MC_WALKS (strip, N, auto) choose)
#   mctests (tests/test_gpu_multicast.py) clusterbench (TMAKIT_CLUSTERS, TMAKIT_CLUSTER_OPTIONS e.g.
#   "--hot-l2 --persistent-clusters auto")
#   dotbench (scripts/cluster_dot_bench.py: the cluster row dot, multicast X against each CTA loading it,
#   beside torch; TMAKIT_DOTBENCH_S bounds it)
# Everything lands in $OUT (logs, JSON, PNG).
set -uo pipefail
commit=$1; shift
export TMAKIT_COMMIT=$commit
# The device tool brings back at most 8 files: work in a folder, pack it into one archive at the end.
final_out=$OUT
export OUT=$final_out/work
mkdir -p "$OUT"
trap 'tar -czf "$final_out/results-$commit.tgz" -C "$OUT" . && rm -rf "$OUT"' EXIT
if ls .whl/*.whl >/dev/null 2>&1; then  # optional wheels (apache-tvm-ffi for the TVM-FFI launch path)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
for step in "$@"; do
  case $step in
    tests) timeout 200 python3 -m pytest -q -m gpu tests 2>&1 | tail -25 | tee "$OUT/gpu-tests.log" ;;
    sweep) timeout 300 python3 -m tmakit verify --sweep 200 --seed 2026 --timeout 60 --json "$OUT/sweep.json" 2>&1 | grep -v "━" | tail -15 ;;
    bench) timeout 300 python3 -m tmakit bench --ncu --commit "$commit" --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" | tail -40 ;;
    pipebench) timeout 260 python3 -m tmakit bench --shape "" --sizes 1024 --pipeline stages=4 --pipeline stages=7 --pipeline stages=4,persistent --pipeline stages=7,persistent --pipeline stages=4,consumer_warps=2,persistent --commit "$commit" --json "$OUT/bench-pipeline.json" 2>&1 | tee "$OUT/bench-pipeline.log" | tail -45 ;;
    check) timeout ${TMAKIT_CHECK_S:-400} python3 scripts/gpu_check.py --commit "$commit" --out "$OUT" 2>&1 | tail -5 ;;
    copybench) timeout ${TMAKIT_COPYBENCH_S:-280} python3 -m tmakit bench --kernel copy ${TMAKIT_COPY_OPTIONS:---copy stages=4 --copy stages=6} --shape "" --sizes "${TMAKIT_COPY_SIZES:-1,16,256,1024,2048}" --commit "$commit" --json "$OUT/bench-copy.json" --plot "$OUT/bench-copy.png" 2>&1 | tail -40 ;;
    transposebench) timeout ${TMAKIT_TRANSPOSEBENCH_S:-200} python3 -m tmakit bench --kernel transpose ${TMAKIT_TRANSPOSE_OPTIONS:---copy stages=4} --shape "" --sizes "${TMAKIT_TRANSPOSE_SIZES:-16,256,1024}" --commit "$commit" --json "$OUT/bench-transpose.json" --plot "$OUT/bench-transpose.png" 2>&1 | tail -30 ;;
    reducebench) timeout ${TMAKIT_REDUCEBENCH_S:-420} python3 -m tmakit bench --kernel reduce ${TMAKIT_REDUCE_OPTIONS:-} --shape "" --sizes "${TMAKIT_REDUCE_SIZES:-16,64,256,1024}" --commit "$commit" --json "$OUT/bench-reduce.json" --plot "$OUT/bench-reduce.png" 2>&1 | tail -70 ;;
    generic) timeout ${TMAKIT_GENERIC_S:-300} python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_generic.py tests/test_gpu_copy.py ${TMAKIT_GENERIC_EXTRA:-} 2>&1 | tail -40 | tee "$OUT/gpu-generic-tests.log" ;;
    copytests) timeout ${TMAKIT_COPYTESTS_S:-300} python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_copy.py -k "${TMAKIT_COPYTESTS_K:-}" 2>&1 | tail -30 | tee "$OUT/gpu-copy-tests.log" ;;
    mcncu) ncu --query-metrics --chip gh100 > "$OUT/ncu-query-metrics-gh100.txt" 2>&1
      timeout ${TMAKIT_MCNCU_S:-300} python3 scripts/ncu_profile.py --out "$OUT" --only "${TMAKIT_NCU_ONLY:-multicast-1x2,multicast-1x4}" --extra --sections 2>&1 | tail -20 ;;
    rowbench) timeout 200 python3 -m tmakit bench --shape "" --sizes 1024 --pipeline stages=7 --pipeline stages=7,consumer_warps=4,consumer=rowsum --pipeline stages=4,consumer_warps=4,consumer=rowsum --pipeline stages=7,consumer_warps=2,consumer=rowsum --pipeline stages=4,consumer_warps=8,consumer=rowsum --pipeline stages=4,consumer_warps=4,persistent,consumer=rowsum --commit "$commit" --json "$OUT/bench-rowsum.json" 2>&1 | tee "$OUT/bench-rowsum.log" | tail -25 ;;
    floor) for shape in 8448x1792 64x256 1024x1792; do  # the seed shape beside tiny ones: the fixed cost
        timeout 100 python3 -m tmakit bench --sizes "" --shape $shape --pipeline stages=7 --pipeline stages=4,prefetch_tiles=2,prefetch_descriptor --pipeline stages=7,prefetch_descriptor --commit "$commit" --json "$OUT/bench-floor-$shape.json" 2>&1 | tail -8
      done ;;
    clusterbench) for cluster in ${TMAKIT_CLUSTERS:-1x2 2x1 2x2 1x4}; do
        timeout 100 python3 -m tmakit bench --sizes "" --cluster $cluster ${TMAKIT_CLUSTER_OPTIONS:-} --commit "$commit" --json "$OUT/bench-cluster-$cluster.json" 2>&1 | tail -6
      done ;;
    prefetchbench) timeout 150 python3 -m tmakit bench --sizes "" --pipeline stages=1 --pipeline stages=2 --pipeline stages=4 --pipeline stages=7 --prefetch 2 --commit "$commit" --json "$OUT/bench-prefetch.json" 2>&1 | tail -4 ;;
    ceiling) timeout ${TMAKIT_CEILING_S:-420} python3 scripts/dram_ceiling.py --out "$OUT/ceiling" ${TMAKIT_CEILING_NCU+--ncu "$TMAKIT_CEILING_NCU"} 2>&1 | tail -30 ;;
    edges) timeout ${TMAKIT_EDGES_S:-400} python3 scripts/gpu_edges.py --commit "$commit" --out "$OUT" ${TMAKIT_EDGES_ONLY:+--only "$TMAKIT_EDGES_ONLY"} 2>&1 | tail -12 ;;
    hostcost) timeout 200 python3 -c "import json, sys; from tmakit.bench import hostcost; r = hostcost.host_cost_report(sys.argv[1]); json.dump(r, open(sys.argv[2], 'w'), indent=1); print(json.dumps(r)[-1800:])" "$commit" "$OUT/host-cost.json" 2> "$OUT/host-cost-stderr.log" | tail -8; tail -3 "$OUT/host-cost-stderr.log" ;;
    im2colbench) timeout ${TMAKIT_IM2COLBENCH_S:-200} python3 scripts/im2col_bench.py --out "$OUT" --commit "$commit" 2>&1 | tail -12 ;;
    mctimeline) timeout ${TMAKIT_MCTIMELINE_S:-400} python3 scripts/multicast_timeline.py --out "$OUT/mctimeline" --clusters "${TMAKIT_MC_CLUSTERS:-1x2,2x2}" ${TMAKIT_MC_PROTOCOLS:+--protocols "$TMAKIT_MC_PROTOCOLS"} --stages "${TMAKIT_MC_STAGES:-4,7}" --walks "${TMAKIT_MC_WALKS:-strip}" --commit "$commit" 2>&1 | tee "$OUT/mctimeline.log" | tail -30 ;;
    mctests) timeout ${TMAKIT_MCTESTS_S:-300} python3 -m pytest -q -p no:cacheprovider tests/test_gpu_multicast.py ${TMAKIT_MCTESTS_EXTRA:-} 2>&1 | tail -15 | tee "$OUT/gpu-multicast-tests.log" ;;
    dotbench) timeout ${TMAKIT_DOTBENCH_S:-300} python3 scripts/cluster_dot_bench.py --out "$OUT" --commit "$commit" 2>&1 | tail -20 ;;
    ncugeneric) timeout ${TMAKIT_NCUGENERIC_S:-200} python3 scripts/ncu_generic.py --commit "$commit" --out "$OUT" 2>&1 | tail -5 ;;
    copyncu) timeout ${TMAKIT_COPYNCU_S:-240} python3 scripts/ncu_profile.py --out "$OUT/copyncu" --only copy- 2>&1 | tail -8 ;;
    ncu) timeout ${TMAKIT_NCU_S:-420} python3 scripts/ncu_profile.py --out "$OUT" --only "${TMAKIT_NCU_ONLY:-}" ${TMAKIT_NCU_FLAGS:-} 2>&1 | tail -20 ;;
    seedbench) for tile in 64x128 32x256; do
        timeout 120 python3 -m tmakit bench --sizes "" --tile $tile --pipeline stages=4 --pipeline stages=4,persistent --pipeline stages=7,persistent --pipeline stages=4,consumer_warps=2,persistent --commit "$commit" --json "$OUT/bench-seed-$tile.json" 2>&1 | tail -3
      done ;;
  esac
done
