#!/usr/bin/env bash
# Issue 82's many-core figures in one call on a machine with 16 cores and no package index
# (../shared/offline/README.md). Here, once: `bash ../shared/offline/prepare.sh` (fills .dev/);
# there, from the checkout's root, one stage a call (each about 7 minutes at 1M rows):
#
#   bash .dev/setup.sh && bash benchmarks/device_cores.sh cores   # the table at 2, 4, 8, 16 threads
#   bash .dev/setup.sh && bash benchmarks/device_cores.sh graph   # the graph against pynndescent
#
# cores: bench_cores.py, the cache pass and D-GMM k = 1 000 on 1M x 384 float16 embeddings
#        (cosine) at each thread count, each in a fresh process pinned to that many cores; then
#        D-GMM beside faiss Kmeans on all cores (bench_knn.py embeddings dgmm: seconds and error).
# graph: the cosine kNN graph (k = 10) of the same rows on all cores beside pynndescent with as
#        many threads (BENCH_PEER_THREADS), recall@10 of both.
#
# Writes each stage's output to $OUT/<stage>.txt (the device tool's folder that comes back; else
# ./device-out) and bench_cores' figures to $OUT/cores.json. EMB_ROWS (1000000) and THREADS
# (2,4,8,16) change the size and the thread counts (a small EMB_ROWS checks the script itself).
set -euo pipefail
stage=${1:-cores}
out=${OUT:-$PWD/device-out}
dir=${DEVICE_DATA:-/tmp/streamclust-device}
rows=${EMB_ROWS:-1000000}
threads=${THREADS:-2,4,8,16}
cores=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
mkdir -p "$out" "$dir"
export NUMBA_CACHE_DIR="$dir/numba" PYTHONUNBUFFERED=1
log="$out/$stage.txt"
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $cores cores:" \
       "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  if [ ! -f "$dir/emb384/part-00000.parquet" ]; then
    python3 benchmarks/make_embeddings.py "$rows" "$dir/emb384" --dim 384 --dtype float16
  fi
  case "$stage" in
    cores)
      # numba's cache is per machine: compile the jobs' kernels on small rows first, so that
      # the first measured run (the 2-thread baseline) is not the one that compiles them
      python3 benchmarks/bench_cores.py --threads 2 --jobs cache,dgmm --dir "$dir/warm" \
          --emb-rows 20000 > /dev/null
      python3 benchmarks/bench_cores.py --threads "$threads" --jobs cache,dgmm --dir "$dir" \
          --emb-rows "$rows" --json "$out/cores.json"
      python3 benchmarks/bench_knn.py embeddings dgmm --data "$dir/emb384" --peers faiss
      ;;
    graph)
      # both builds compiled once on small rows first (numba's caches are per machine)
      [ -f "$dir/warm/emb384/part-00000.parquet" ] || python3 benchmarks/make_embeddings.py \
          20000 "$dir/warm/emb384" --dim 384 --dtype float16 > /dev/null
      python3 -m streamclust.cli graph "$dir/warm/emb384" -n 10 -f x --metric cosine -q \
          --out "$dir/warm/graph" --overwrite > /dev/null
      python3 -c "import numpy as np; from pynndescent import NNDescent; NNDescent(np.random.default_rng(0).random((5000, 384), np.float32), metric='cosine', n_neighbors=11, n_jobs=$cores)"
      BENCH_PEER_THREADS=$cores python3 benchmarks/bench_knn.py embeddings graph \
          --data "$dir/emb384" --peers pynndescent
      ;;
    *)
      echo "unknown stage '$stage': cores or graph" >&2
      exit 2
      ;;
  esac
} 2>&1 | tee "$log"
