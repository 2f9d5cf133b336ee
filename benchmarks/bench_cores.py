"""How a fit uses the cores it is given: per phase, wall, CPU and **serial** seconds at several
thread counts, and the time the serial part projects at 16 and 64 cores.

Each (job, thread count) runs in a fresh process limited to ``T`` cores (its CPU affinity: the
first ``T`` this process may use; ``threads=T``, so numba, BLAS and the readers take their
share of that budget).  Phases are the engine's steps, timed by wrapping them in that process:
the cache pass (``FeatureCache.build``), the kNN graph's cells and searches, the declared
summaries, the algorithm's ``start`` (seeding, D-GMM's starts), each epoch (named by the
algorithm's phase where it has one: D-GMM's ``starts`` / ``refine`` / ``full``) and ``finish``.

**Serial seconds, measured.**  A sampler thread reads the process's CPU clock (all its threads)
and the wall clock every 5 ms.  Over each interval the process kept ``busy = ΔCPU / Δwall``
cores busy.  With ``T`` threads, an interval of which a share ``s`` ran one thread while the
others waited and the rest ran all ``T`` has ``busy = s + (1 − s) T``, so
``s = (T − busy) / (T − 1)``, at most 1 (time with less than one core busy, waits on disk or
on a lock, counts as serial: more cores do not shorten it).  Numba's OpenMP threads spin
for milliseconds after each parallel region (OpenMP's default, what a fit runs with) and read as
busy, so a part made of many small regions reads as parallel when it is not.  ``--omp-wait
passive`` runs the children with ``OMP_WAIT_POLICY=PASSIVE``: idle threads sleep and read as
idle, but waking them adds its own cost to such parts (D-GMM's greedy seeding at 2 threads,
2026-12-05: 2.9 s, 15 % serial spinning; 6.4 s, 83 % passive; 4.7 s on one thread).  The two
bound a part's serial share from below and above.  ``s`` is not clipped at 0: the
two clocks are not read at one instant, and an interval read as busier than ``T`` cores
balances its neighbour read as less busy (clipped, a fully parallel kernel read as ~15 %
serial).  A phase's serial seconds are ``Σ s · Δwall`` over its intervals, i.e.
``(T · wall − CPU) / (T − 1)`` plus the idle time's correction; its time at ``N`` cores projects
as ``serial + (wall − serial) · T / N``.  The sampler needs the GIL, so an interval may span a
whole kernel call that holds it: ``s`` is then that call's average, which is what the model
asks for.  Another program on a shared machine takes cores away and reads as serial time: run
on a quiet machine and repeat (``--repeat``: medians).  The disk is quiet too: the parent
removes the cache or graph a job builds again, calls ``os.sync()`` and waits ``SETTLE``
seconds before each child, so the writeback of what the child before wrote and the release of
the files removed do not take a core from the next job (12-06, the cache pass after the last
one's removal, three runs each: 0.59-0.67 serial seconds at once, 0.46-0.66 after ``sync``,
0.23-0.50 after ``sync`` and 3 s).  Threads that spin while they wait (BLAS
pools given more than one thread) read as busy: a serial share is only as good as the process
keeps its idle threads asleep (the engine runs BLAS on one thread during a fit).  Work split in fewer parts than ``T``
reads as parallel at ``T`` threads but not at more: the table at 2 threads bounds the serial
time from below; the projection is checked only by a run on more cores.

**The floor.**  After its job each child runs a kernel with no serial part (``T`` threads of
equal arithmetic, no memory traffic, no locks) for as long as the job took, at most
``FLOOR_MAX`` seconds, and the sampler reads its serial share the same way: what the machine and
the method read as serial where there is none (a 2-core shared machine, 2026-12-06: 1–10 % of
an 8.5 s kernel, run to run).  ``floor s`` is that share of each phase's wall time; a serial
share near it is at what the machine can show.

Jobs (``--jobs``; data made once in ``--dir``, reused):

* ``cache``: the feature cache of ``--emb-rows`` (1M) × 384 float16 unit vectors
  (``make_embeddings.py``), cosine, a float32 cache (``--cache-dtype float16``: a float16 one);
* ``dgmm``: D-GMM k = 1 000 on that cache (built by the job before, reused);
* ``graph``: the cosine kNN graph (k = 10) of those rows (``knn_graph``, cache reused);
* ``slk``, ``ncutemb``: k = 10 on ``--digit-rows`` (1M) × 50 ``make_digits.py`` rows;
* ``infex``: INFEX on usps (9298 × 256, its defaults); ``ism``: ISM on WebKB with ``given``.

    python benchmarks/bench_cores.py [--threads 1,2] [--jobs cache,dgmm,graph,slk,ncutemb,infex,ism]
        [--emb-rows 1000000] [--digit-rows 1000000] [--dir DIR] [--repeat 1] [--json OUT]
        [--cache-dtype float32|float16] [--omp-wait spin|passive]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import SHARED_DATA, median, table  # noqa: E402

JOBS = ("cache", "dgmm", "graph", "slk", "ncutemb", "infex", "ism")
#: the feature cache's type of the cache and dgmm jobs (``--cache-dtype``)
CACHE_DTYPE = os.environ.get("BENCH_CORES_CACHE_DTYPE", "float32")
TICK = 0.005
#: seconds each child waits after ``os.sync()`` before it starts (see the module's text)
SETTLE = 3.0
#: seconds the floor's kernel runs at most (see the module's text)
FLOOR_MAX = 8.0


class Sampler:
    """(wall, process CPU) every ``TICK`` seconds in a daemon thread, and named spans."""

    def __init__(self):
        self.t, self.c, self.spans = [], [], []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.t.append(time.perf_counter())
            self.c.append(time.process_time())
            time.sleep(TICK)

    def __enter__(self):
        self._th.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._th.join()
        self.t.append(time.perf_counter())
        self.c.append(time.process_time())

    def wrap(self, owner, attr, name):
        """``owner.attr`` (a function or method) timed as span ``name`` (a callable of the
        call's arguments gives a name per call)."""
        fn = getattr(owner, attr)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.spans.append((name(*a) if callable(name) else name, t0, time.perf_counter()))
        setattr(owner, attr, timed)

    def measure(self, t0, t1, T):
        """(wall, CPU, serial) seconds over [t0, t1]."""
        t, c = np.asarray(self.t), np.asarray(self.c)
        a, b = np.searchsorted(t, t0), np.searchsorted(t, t1)
        ts = np.concatenate(([t0], t[a:b], [t1]))
        # CPU at the ends by linear interpolation of the samples around them
        cs = np.interp(ts, t, c)
        dw, dc = np.diff(ts), np.diff(cs)
        busy = np.divide(dc, dw, out=np.zeros_like(dw), where=dw > 0)
        # not clipped at 0: an interval read as busier than T cores (the two clocks are not
        # read at one instant) balances one read as less busy, as over the whole span
        s = np.ones_like(dw) if T <= 1 else np.minimum((T - busy) / (T - 1), 1.0)
        return float(dw.sum()), float(dc.sum()), float(min(max((s * dw).sum(), 0.0), dw.sum()))


def floor_share(T, seconds):
    """The serial share the sampler reads of a kernel with none, run ``seconds`` on ``T``
    threads (each thread the same count of sines)."""
    if T <= 1:
        return 1.0
    import numba
    from numba import prange

    @numba.njit(parallel=True)
    def spin(T, n):
        out = np.zeros(T)
        for t in prange(T):
            x = 0.0
            for i in range(n):
                x += np.sin(i * 1e-9 + t)
            out[t] = x
        return out
    spin(T, 1000)
    t0 = time.perf_counter()
    spin(T, 2_000_000)
    n = int(2_000_000 * seconds / max(time.perf_counter() - t0, 1e-6))
    S = Sampler()
    with S:
        t0 = time.perf_counter()
        spin(T, n)
        t1 = time.perf_counter()
    w, _, s = S.measure(t0, t1, T)
    return s / w


def _limit(T):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cpus[:T])


def _instrument(S, algo_cls=None):
    from streamclust.data.cache import FeatureCache
    from streamclust.graph import build as gb
    from streamclust.run.context import Context
    build = FeatureCache.build.__func__
    FeatureCache.build = classmethod(lambda cls, *a, **kw: _span(S, "cache pass", build, cls, *a, **kw))
    S.wrap(gb, "_centres", "graph: cells' centres")
    S.wrap(gb, "_own_cells", "graph: cells")
    S.wrap(gb, "_search_cells", "graph: searches")
    S.wrap(Context, "prepare", "summaries")
    if algo_cls is not None:
        S.wrap(algo_cls, "start", "start (seeding)")
        S.wrap(algo_cls, "run_epoch",
               lambda self, ctx: f"epochs: {getattr(self, 'phase_', None) or 'all'}")
        S.wrap(algo_cls, "finish", "finish")


def _span(S, name, fn, *a, **kw):
    t0 = time.perf_counter()
    try:
        return fn(*a, **kw)
    finally:
        S.spans.append((name, t0, time.perf_counter()))


def run_job(job, T, d):
    """In the child process: the job with ``T`` threads; returns its phases."""
    _limit(T)
    import numba
    import streamclust
    from streamclust.plugins import PluginHost
    numba.set_num_threads(T)
    host = PluginHost()
    emb, digits = os.path.join(d, "emb384"), os.path.join(d, "digits50")
    work = os.path.join(d, "work_emb")
    if job == "graph":  # built, not reused (the parent removed the last one: ``_child``)
        cls, call = None, lambda: streamclust.knn_graph(emb, 10, features="x", metric="cosine",
                                                        work_dir=os.path.join(d, "work_graph"),
                                                        progress=False, threads=T)
    else:
        algo = {"cache": "dgmm", "dgmm": "dgmm"}.get(job, job)
        cls = type(host.algorithm(algo)(10))
        if job in ("cache", "dgmm"):
            kw = dict(data=emb, n_clusters=1000, features="x", metric="cosine",
                      cache_dtype=CACHE_DTYPE, work_dir=work)
            if job == "cache":  # the pass alone (the cache removed by ``_child``): one epoch
                kw.update(max_epochs=1)
        elif job in ("slk", "ncutemb"):
            kw = dict(data=digits, n_clusters=10, features="x")
        elif job == "infex":
            z = np.load(os.path.join(SHARED_DATA, "usps.npz"))
            kw = dict(data=np.ascontiguousarray(z["X"], np.float32))
        else:
            z = np.load(os.path.join(SHARED_DATA, "ism", "webkb_1041x139.npz"))
            import pyarrow as pa
            kw = dict(data=pa.table({"x": pa.FixedSizeListArray.from_arrays(
                pa.array(np.ascontiguousarray(z["X"], np.float32).ravel()), z["X"].shape[1]),
                "given": z["y_given"].astype(np.int64)}), n_clusters=int(z["y_alt"].max() + 1),
                features="x", given="given")
        call = lambda: streamclust.fit(algorithm=algo, seed=0, progress=False, host=host,  # noqa
                                       threads=T, **kw)
    S = Sampler()
    _instrument(S, cls)
    with S:
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
    out = {}
    spans = sorted(S.spans, key=lambda s: s[1])
    covered = []
    for name, a, b in spans:
        if job == "dgmm" and name == "cache pass":
            name = "cache (reused)"
        if job == "cache" and not name.startswith("cache"):
            continue
        if any(a >= ca and b <= cb for ca, cb in covered):  # inside a span already counted
            continue
        covered.append((a, b))
        w, c, s = S.measure(a, b, T)
        acc = out.setdefault(name, [0.0, 0.0, 0.0])
        acc[0] += w
        acc[1] += c
        acc[2] += s
    if job != "cache":  # outside every span: opening, planning, the model
        w, c, s = S.measure(t0, t1, T)
        for v in list(out.values()):
            w, c, s = w - v[0], c - v[1], s - v[2]
        out["other"] = [w, c, s]
    out["_floor"] = floor_share(T, min(t1 - t0, FLOOR_MAX))
    return out


def make_data(d, jobs, emb_rows, digit_rows):
    py = sys.executable
    if {"cache", "dgmm", "graph"} & set(jobs) and not os.path.isdir(os.path.join(d, "emb384")):
        subprocess.run([py, os.path.join(HERE, "make_embeddings.py"), str(emb_rows),
                        os.path.join(d, "emb384"), "--dim", "384", "--dtype", "float16"], check=True)
    if {"slk", "ncutemb"} & set(jobs) and not os.path.isdir(os.path.join(d, "digits50")):
        subprocess.run([py, os.path.join(HERE, "make_digits.py"), str(digit_rows),
                        os.path.join(d, "digits50")], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--emb-rows", type=int, default=1_000_000)
    ap.add_argument("--digit-rows", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None, help="data and work directories (kept); default a temp")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the rows here too")
    ap.add_argument("--cache-dtype", default="float32", choices=["float32", "float16"])
    ap.add_argument("--omp-wait", default="spin", choices=["spin", "passive"],
                    help="how idle OpenMP threads wait in the children (spin: OpenMP's default, "
                         "read as busy by the sampler; passive: asleep, woken at a cost)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        job, T, d = a.child
        print(json.dumps(run_job(job, int(T), d)))
        return
    os.environ["BENCH_CORES_CACHE_DTYPE"] = a.cache_dtype  # (the children read it)
    if a.omp_wait == "passive":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        os.environ.pop("OMP_WAIT_POLICY", None)
    print(f"# idle OpenMP threads: {a.omp_wait} (--omp-wait)")
    threads = [int(t) for t in a.threads.split(",")]
    jobs = [j for j in a.jobs.split(",") if j]
    bad = set(jobs) - set(JOBS)
    if bad:
        ap.error(f"unknown jobs {sorted(bad)}; choose from {', '.join(JOBS)}")
    have = len(os.sched_getaffinity(0))
    if max(threads) > have:
        print(f"# {have} cores here: thread counts above it skipped")
        threads = [t for t in threads if t <= have]
    d = a.dir or tempfile.mkdtemp(prefix="bench-cores-")
    os.makedirs(d, exist_ok=True)
    make_data(d, jobs, a.emb_rows, a.digit_rows)
    rows, record = [], []
    for job in jobs:
        for T in threads:
            runs = []
            for _ in range(a.repeat):
                if job == "dgmm" and not os.path.isdir(os.path.join(d, "work_emb")):
                    _child("cache", T, d)
                runs.append(_child(job, T, d))
            floor = median([r.pop("_floor") for r in runs])
            for phase in runs[0]:
                w, c, s = (median([r[phase][i] for r in runs]) for i in range(3))
                rows.append(_row(job, T, phase, w, c, s, floor))
                record.append({"job": job, "threads": T, "phase": phase, "wall": w, "cpu": c,
                               "serial": s, "floor": floor * w if T > 1 else 0.0})
            tot = [sum(r[p][i] for p in r) for r in runs for i in range(3)]
            rows.append(_row(job, T, "= all", *(median(tot[i::3]) for i in range(3)), floor))
    table(rows, ["job", "threads", "phase", "wall s", "CPU s", "serial s", "serial share",
                 "floor s", "at 16 s", "at 64 s"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(record, f, indent=1)


def _row(job, T, phase, w, c, s, floor):
    p16, p64 = (s + (w - s) * T / n for n in (16, 64))
    return [job, T, phase, f"{w:.2f}", f"{c:.2f}", f"{s:.2f}",
            f"{100 * s / w:.0f}%" if w > 0 else "-", f"{floor * w:.2f}" if T > 1 else "-",
            f"{p16:.2f}", f"{p64:.2f}"]


def _child(job, T, d):
    env = dict(os.environ, NUMBA_NUM_THREADS=str(max(T, 1)))
    if job in ("cache", "graph"):  # built again, not reused
        shutil.rmtree(os.path.join(d, "work_emb" if job == "cache" else "work_graph"),
                      ignore_errors=True)
    os.sync()  # the disk quiet first: the writeback of the last child's files and the
    time.sleep(SETTLE)  # release of removed ones are not this job's time
    r = subprocess.run([sys.executable, __file__, "--child", job, str(T), d], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{job} at {T} threads failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
