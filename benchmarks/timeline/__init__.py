"""The multicast ring's timeline: a lab beside tmakit, not part of it (`scripts/multicast_timeline.py`
runs it; put this folder's parent, `benchmarks/`, on the path to import it as `timeline`).

- `layout`: where the instrumented ring writes its time stamps (pure Python);
- `kernels`: the cluster ring with time stamps, the same ring on CUTLASS's `PipelineTmaAsync`, and
  their compile (`compile_cluster_ring`: tmakit's own ring for its release protocols unstamped);
- `study`: each variant verified, timed L2-hot, launched once with stamps and the stamps summarised.
"""
