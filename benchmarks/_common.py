"""Helpers shared by the benchmark families (``bench_*.py``, their jobs in ``jobs/``): tables,
the data generators' files, peak memory of a child process, exact neighbours and recall."""
import glob
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
#: threads of the peer libraries (pynndescent, hnswlib) in the kNN benchmarks: 2, the project's
#: machines; ``BENCH_PEER_THREADS=16`` on a 16-core one (``device_cores.sh``)
PEER_THREADS = int(os.environ.get("BENCH_PEER_THREADS", "2"))


def table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(v).rjust(w) for v, w in zip(r, widths)))


def median(xs):
    return statistics.median(xs)


def vector_table(name, X, **columns):
    """A pyarrow Table with ``X`` as one ``fixed_size_list<float32>`` column ``name`` and
    ``columns`` (arrays) beside it."""
    import numpy as np
    import pyarrow as pa
    X = np.ascontiguousarray(X, dtype=np.float32)
    cols = {name: pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])}
    cols.update({k: pa.array(v) for k, v in columns.items()})
    return pa.table(cols)


def dispatch(script: str, doc: str, jobs: dict, default=None) -> None:
    """Run the job named by the first argument (``jobs``: name → (module, what it measures));
    without one, ``default`` (the family's former script) or the list of jobs."""
    import importlib
    args = sys.argv[1:]
    if args and args[0] in jobs:
        name, rest = args[0], args[1:]
    elif default and not (args and args[0] in ("-h", "--help")):
        name, rest = default, args
    else:
        print(doc.strip() + "\n\njobs (`python benchmarks/%s JOB --help`):" % os.path.basename(script))
        for n, (_, what) in jobs.items():
            print(f"  {n:<11} {what}" + (" [default]" if n == default else ""))
        sys.exit(0 if args and args[0] in ("-h", "--help") else 2)
    sys.argv = [f"{os.path.basename(script)} {name}"] + rest
    importlib.import_module(jobs[name][0]).main()


# -- generated data, child processes and their memory (the scale and memory jobs) ---------------
def write_data(path, rows, dim, clusters, chunk=500_000, seed=0, session_rows=0):
    """Blobs around ``clusters`` random centres; with ``session_rows`` > 0 also a ``session``
    column: runs of that many consecutive rows drawn from one cluster share a session id."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=5.0, size=(clusters, dim)).astype(np.float32)
    os.makedirs(path, exist_ok=True)
    for i, s in enumerate(range(0, rows, chunk)):
        n = min(chunk, rows - s)
        extra = {}
        if session_rows > 0:
            session = (s + np.arange(n)) // session_rows
            first = session[0]
            of_session = rng.integers(0, clusters, session[-1] - first + 1)
            c = of_session[session - first]
            extra["session"] = session.astype(np.int64)
        else:
            c = rng.integers(0, clusters, n)
        X = centers[c] + rng.normal(size=(n, dim)).astype(np.float32)
        pq.write_table(vector_table("embedding", X, **extra),
                       os.path.join(path, f"part-{i:04d}.parquet"), row_group_size=100_000)


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def peak_anon_kb(p) -> int:
    """Peak ``RssAnon`` (KiB) of the running process ``p`` (a Popen), polled every 20 ms until
    it ends."""
    peak = 0
    while p.poll() is None:
        try:
            peak = max(peak, status_kb(p.pid, "RssAnon"))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.02)
    return peak


# -- exact neighbours and recall (the graph jobs) ----------------------------------------------
FILE_ROWS = 500_000


def run(cmd):
    """(seconds, peak RssAnon MiB) of a command; fails loudly."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd)
    peak = peak_anon_kb(p)
    if p.wait() != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t, peak / 1024


def parquet_rows(data, n, d, column="x"):
    """In a peer's process: the first ``n`` rows of the vector column of the Parquet files in
    ``data`` as one float32 array, the files read side by side on ``PEER_THREADS`` threads in
    batches of 8 192 rows into it (as a careful user of an in-memory library reads them: larger
    batches cost pyarrow several times the system time, one 500 000-row file 3.7 s against 7.5
    with ``read_table``); also the seconds it took."""
    import pyarrow.parquet as pq
    from concurrent.futures import ThreadPoolExecutor
    t = time.perf_counter()
    files = [os.path.join(data, f) for f in sorted(os.listdir(data)) if f.endswith(".parquet")]
    rows = np.cumsum([0] + [pq.ParquetFile(f).metadata.num_rows for f in files])
    X = np.empty((n, d), np.float32)

    def one(i):
        at = int(rows[i])
        for b in pq.ParquetFile(files[i]).iter_batches(8192, columns=[column]):
            if at >= n:
                return
            v = b.column(0).flatten().to_numpy().reshape(-1, d)[:n - at]
            X[at:at + len(v)] = v
            at += len(v)
    with ThreadPoolExecutor(PEER_THREADS) as pool:
        list(pool.map(one, [i for i in range(len(files)) if rows[i] < n]))
    return X, time.perf_counter() - t


def pynndescent_ids(X, out, read_seconds=None, **kw):
    """In a peer's process: pynndescent's graph of ``X`` (``NNDescent(X, **kw)``'s ids), its
    build timed alone into ``out.json`` after a build of 5 000 rows has compiled its numba
    kernels (they compile in every process)."""
    from pynndescent import NNDescent
    NNDescent(X[:5000], **kw)
    t = time.perf_counter()
    ids = NNDescent(X, **kw).neighbor_graph[0]
    with open(out + ".json", "w") as f:
        json.dump({"build_seconds": time.perf_counter() - t, "read_seconds": read_seconds}, f)
    return ids


def build_note(out, ours):
    """The note's ratio of ``ours`` (seconds) to a peer's build alone, where it timed one."""
    if not os.path.exists(out + ".json"):
        return ""
    with open(out + ".json") as f:
        got = json.load(f)
    built, read = got["build_seconds"], got.get("read_seconds")
    return (f" ({ours / built:.2f}x its {built:.1f} s build after its kernels compiled"
            + ("" if read is None else f"; {read:.1f} s reading the Parquet files") + ")")


def exact_sample(X, rows, k, chunk=16384):
    """Exact k nearest other rows of ``rows`` (ids, distances) by brute force over ``X``: BLAS
    distances pick candidates (at most the current k-th, with slack), float64 decides."""
    Q = np.asarray(X[rows], dtype=np.float32)
    q64 = Q.astype(np.float64)
    m = len(rows)
    best_i = np.zeros((m, 0), np.int64)
    best_d = np.zeros((m, 0))
    for s in range(0, len(X), chunk):
        B = np.asarray(X[s:s + chunk], dtype=np.float32)
        D = (Q * Q).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * (Q @ B.T)
        D[rows[:, None] == np.arange(s, s + len(B))[None, :]] = np.inf
        if best_d.shape[1] < k:  # the first chunk: its k + 8 nearest
            top = np.argpartition(D, min(k + 8, D.shape[1] - 1), axis=1)[:, :k + 8]
            qi, bi = np.repeat(np.arange(m), top.shape[1]), top.ravel()
        else:
            qi, bi = np.nonzero(D <= (best_d[:, -1:] * 1.001 + 1e-3))
        bi = bi + s
        d = ((q64[qi] - np.asarray(X[bi], dtype=np.float64)) ** 2).sum(1)
        qi = np.concatenate([np.repeat(np.arange(m), best_i.shape[1]), qi])
        bi = np.concatenate([best_i.ravel(), bi])
        d = np.concatenate([best_d.ravel(), d])
        order = np.lexsort((bi, d, qi))
        qi, bi, d = qi[order], bi[order], d[order]
        first = np.searchsorted(qi, np.arange(m))
        rank = np.arange(len(qi)) - first[qi]
        keep = rank < k
        best_i = bi[keep].reshape(m, k)
        best_d = d[keep].reshape(m, k)
    return best_i, np.sqrt(best_d)


def recall(X, rows, ids, exact_d):
    Q = np.asarray(X[rows], dtype=np.float64)
    found = np.asarray(X[np.asarray(ids).ravel()], dtype=np.float64).reshape(len(rows), -1, X.shape[1])
    d = np.linalg.norm(Q[:, None, :] - found, axis=2)
    return float((d <= exact_d[:, -1:] * (1 + 1e-6) + 1e-9).mean())


def ensure_data(path, rows):
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    if len(files) * FILE_ROWS < rows:
        subprocess.run([sys.executable, os.path.join(HERE, "make_digits.py"), str(rows), path],
                       check=True)
        files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    return files


def size_dir(root, files, rows, tail=0):
    """A directory of the first ``rows + tail`` rows: links to whole files, and the first rows
    of the next file written out."""
    d = os.path.join(root, f"rows-{rows}-{tail}")
    os.makedirs(d)
    whole, rest = divmod(rows + tail, FILE_ROWS)
    for f in files[:whole]:
        os.symlink(os.path.abspath(f), os.path.join(d, os.path.basename(f)))
    if rest:
        import pyarrow.parquet as pq
        t = pq.read_table(files[whole]).slice(0, rest)
        pq.write_table(t, os.path.join(d, os.path.basename(files[whole])))
    return d


def drop_own(ids, k):
    """A peer's ``k + 1`` answers per row without the row itself (else without the last)."""
    ids = np.asarray(ids).astype(np.int64)
    n = len(ids)
    own = ids == np.arange(n)[:, None]
    drop = np.where(own.any(1), own.argmax(1), k)
    keep = np.ones_like(ids, bool)
    keep[np.arange(n), drop] = False
    return ids[keep].reshape(n, k)
