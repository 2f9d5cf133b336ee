"""A cluster without a shared filesystem (issue 49): deformed digits (``make_digits.py``) served
by an S3 server (moto's, in its own process) to a Dask scheduler and 2 workers (processes, one
thread each), against today's shared-work-directory mode in the same run.

* **cache**: each worker reading its share from S3 into its own ``local_directory``
  (``ShardedCache.build``), with 1 worker and with 2 (``speedup``: 1 worker's seconds / 2
  workers'; beside it the CPU seconds of the S3 server and of each worker during the build,
  which on a machine of 2 cores share them); then the same from the Parquet files on this
  disk read through pyarrow's filesystem API (``local://DIR``: the workers' shared-nothing path,
  without a server taking the workers' cores); the shared mode's cache is built by the client
  alone, from the same S3 data.
* **fit**: D-GMM (``--epochs``) and SLK (``--slk-epochs``, k = 10, its defaults) on the 2
  workers in each mode (``local-by-value``: shared-nothing with ``hold_arrays=False``, every
  pass sending its row state and large parameters to the workers, as before they held them):
  the median epoch's seconds, the fit's, and the bytes the scheduler
  process read and wrote over its sockets during the fit (``/proc/PID/io``: ``rchar + wchar``)
  against the data's bytes (rows × features × 4).  SLK's shared-nothing fit keeps a copy of all
  rows on the client (its kNN graph is built there); its row says how long that took.
* ``--kill-trials N``: N shared-nothing fits of each of ``--kill-algorithms`` (dgmm,slk), each
  with one of the 2 workers SIGKILLed at a random moment inside the fit: seconds against the
  uninterrupted fit's, and whether the labels are equal.

    python benchmarks/bench_dask.py cluster --data-dir DIR [--rows 8000000] [--epochs 3] [--k 20]
                                       [--slk-epochs 2] [--kill-trials 10] [--algorithms dgmm,slk]
                                       [--pin-workers]
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import median, table  # noqa: E402

import streamclust  # noqa: E402

KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def io_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        v = dict(line.split(": ") for line in f.read().splitlines())
    return int(v["rchar"]) + int(v["wchar"])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


class Cluster:
    def __init__(self, root, pin=False):
        self.root, self.procs, self.workers, self.pin = root, [], [], pin
        self.env = dict(os.environ, **KEYS)
        os.environ.update(KEYS)
        self.s3_port, port = free_port(), free_port()
        self.procs.append(subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                            "-p", str(self.s3_port)], env=self.env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                           "--host", "127.0.0.1", "--port", str(port),
                                           "--no-dashboard"], env=self.env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(self.scheduler)
        self.address = f"tcp://127.0.0.1:{port}"
        wait_port(self.s3_port)
        wait_port(port)
        import distributed
        self.client = distributed.Client(self.address)

    def add_worker(self):
        folder = os.path.join(self.root, f"w{len(self.workers)}")
        os.makedirs(folder, exist_ok=True)
        # --pin-workers: worker i on core i alone (as if each were a machine of one core)
        pin = ["taskset", "-c", str(len(self.workers) % os.cpu_count())] if self.pin else []
        p = subprocess.Popen(pin + [sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                              "--nthreads", "1", "--no-nanny", "--no-dashboard",
                              "--local-directory", folder], env=self.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        self.workers.append(folder)
        self.client.wait_for_workers(len(self.workers), timeout=120)

    def clear_shares(self):
        for w in self.workers:
            shutil.rmtree(os.path.join(w, "streamclust-shards"), ignore_errors=True)

    def upload(self, local: str) -> tuple:
        import boto3
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.s3_port}",
                          region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        size = 0
        for name in sorted(f for f in os.listdir(local) if f.endswith(".parquet")):
            with open(os.path.join(local, name), "rb") as f:
                body = f.read()
            s3.put_object(Bucket="bench", Key=f"digits/{name}", Body=body)
            size += len(body)
        uri = f"s3://bench/digits?endpoint_override=127.0.0.1:{self.s3_port}&scheme=http"
        return uri, size

    def close(self):
        self.client.close()
        for p in reversed(self.procs):
            p.kill()
            p.wait()


def build_seconds(cluster, uri, batch_size):
    from streamclust.data.sources import open_data
    from streamclust.run.dask_executor import DaskExecutor
    from streamclust.run.shards import ShardedCache
    cluster.clear_shares()
    d = open_data(uri, features="x")
    workers = [p.pid for p in cluster.procs[2:]]  # (after the S3 server and the scheduler)
    before = [cpu_seconds(pid) for pid in workers]
    s3, t = cpu_seconds(cluster.procs[0].pid), time.perf_counter()
    ShardedCache.build(d, DaskExecutor(cluster.client), batch_size, "", "float32")
    wall, server = time.perf_counter() - t, cpu_seconds(cluster.procs[0].pid) - s3
    return wall, server, [cpu_seconds(pid) - b for pid, b in zip(workers, before)]


def fit(cluster, uri, mode, work, k, epochs, batch_size, algorithm="dgmm"):
    from streamclust.run.dask_executor import DaskExecutor
    cluster.clear_shares()
    shutil.rmtree(work, ignore_errors=True)
    ex = DaskExecutor(cluster.client, worker_cache=mode.split("-")[0])
    ex.hold_arrays = not mode.endswith("-by-value")
    before, t = io_bytes(cluster.scheduler.pid), time.perf_counter()
    extra = dict(max_epochs=epochs, tol=1e-300) if algorithm == "dgmm" else dict(max_epochs=epochs)
    m = streamclust.fit(uri, algorithm, k, features="x", work_dir=work, executor=ex, seed=0,
                        progress=False, batch_size=batch_size, **extra)
    seconds = time.perf_counter() - t
    sent = io_bytes(cluster.scheduler.pid) - before
    return seconds, median([h["seconds"] for h in m.history]), sent, m


def kill_trials(cluster, uri, root, a, algorithm, k, epochs):
    """The shared-nothing fit uninterrupted, then with one of the 2 workers SIGKILLed at a
    uniform random moment of its first 80 % (seeded by the trial; drawn again, earlier, when
    the fit ended before it): seconds against the uninterrupted fit's, labels of a 1 % sample
    of the rows against its labels."""
    import random
    import threading

    import numpy as np
    from streamclust.data.sources import open_data
    d = open_data(uri, features="x")
    sample = np.sort(np.random.default_rng(0).choice(d.n_rows, max(1, d.n_rows // 100),
                                                     replace=False))
    from streamclust.data.rowslice import row_slice
    X = np.concatenate([b.X for b in row_slice(d, 0, d.n_rows).iter_batches(1 << 16)])[sample]
    seconds, _, _, want = fit(cluster, uri, "local", os.path.join(root, "kill-0"), k, epochs,
                              a.batch_size, algorithm)
    ref = want.predict(X)
    out = []
    for trial in range(a.kill_trials):
        rng = random.Random(trial)
        at = rng.uniform(0, 0.8 * seconds)
        for _ in range(4):
            victim = cluster.procs[-1]
            timer = threading.Timer(at, victim.kill)
            timer.start()
            try:
                took, _, _, got = fit(cluster, uri, "local", os.path.join(root, f"kill-{trial}"),
                                      k, epochs, a.batch_size, algorithm)
            finally:
                timer.cancel()
                killed = victim.poll() is not None
                if killed:
                    cluster.workers.pop()
                    cluster.add_worker()
            if killed:
                break
            at = rng.uniform(0, 0.8 * min(at, took))
        out.append([algorithm, trial, f"{at:.1f}", f"{took:.1f}", f"{took / seconds:.2f}",
                    bool(np.array_equal(got.predict(X), ref)), killed])
    print(f"kill trials, {algorithm} (uninterrupted shared-nothing fit: {seconds:.1f} s)")
    table(out, ["algorithm", "trial", "killed at s", "fit s", "× uninterrupted", "equal labels",
                "killed inside"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--rows", type=int, default=8_000_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=65536)
    ap.add_argument("--slk-epochs", type=int, default=2)
    ap.add_argument("--kill-trials", type=int, default=0,
                    help="then SIGKILL one of the 2 workers at a random moment of this many "
                         "shared-nothing fits: time against the uninterrupted fit, equal labels")
    ap.add_argument("--kill-algorithms", default="dgmm,slk")
    ap.add_argument("--algorithms", default="dgmm,slk", help="the fits timed in both modes")
    ap.add_argument("--pin-workers", action="store_true",
                    help="worker i runs on core i alone (taskset): one core a worker, as on a "
                         "cluster of one-core machines; the S3 server and the client are not pinned")
    a = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
    if not any(f.endswith(".parquet") for f in os.listdir(a.data_dir) if os.path.isdir(a.data_dir)):
        subprocess.run([sys.executable, os.path.join(here, "make_digits.py"), str(a.rows),
                        a.data_dir, "--file-rows", "500000"], check=True)
    root = tempfile.mkdtemp(prefix="bench-cluster-")
    cluster = Cluster(root, pin=a.pin_workers)
    try:
        uri, size = cluster.upload(a.data_dir)
        from streamclust.data.sources import open_data
        d = open_data(uri, features="x")
        data_bytes = d.n_rows * d.n_features * 4
        print(f"{d.n_rows} rows × {d.n_features} on S3 ({size / 1e9:.2f} GB of Parquet, "
              f"{data_bytes / 1e9:.2f} GB as float32)")
        # the same files read by the workers through pyarrow's filesystem API from this disk
        # (the shared-nothing path, spans included, without a server on the workers' cores)
        files = "local://" + os.path.abspath(a.data_dir)
        cluster.add_worker()
        one, cpu1, w1 = build_seconds(cluster, uri, a.batch_size)
        one_f, _, wf1 = build_seconds(cluster, files, a.batch_size)
        cluster.add_worker()
        two, cpu2, w2 = build_seconds(cluster, uri, a.batch_size)
        two_f, _, wf2 = build_seconds(cluster, files, a.batch_size)
        print(f"cache on the workers from S3: 1 worker {one:.1f} s, 2 workers {two:.1f} s, "
              f"speedup {one / two:.2f}× (the S3 server's own CPU: {cpu1:.1f} s, {cpu2:.1f} s; "
              f"the workers' CPU: {' + '.join(f'{c:.1f}' for c in w1)} s, "
              f"{' + '.join(f'{c:.1f}' for c in w2)} s; {os.cpu_count()} cores)")
        print(f"cache on the workers from {files} (no server): 1 worker {one_f:.1f} s, "
              f"2 workers {two_f:.1f} s, speedup {one_f / two_f:.2f}× (the workers' CPU: "
              f"{' + '.join(f'{c:.1f}' for c in wf1)} s, {' + '.join(f'{c:.1f}' for c in wf2)} s)")
        rows = []
        runs = [r for r in (("dgmm", a.k, a.epochs), ("slk", 10, a.slk_epochs))
                if r[0] in a.algorithms.split(",")]
        for algorithm, k, epochs in runs:
            for mode in ("shared", "local", "local-by-value"):
                s, epoch, sent, m = fit(cluster, uri, mode, os.path.join(root, f"work-{mode}"), k,
                                        epochs, a.batch_size, algorithm)
                graph = m.info.get("knn", {}).get("seconds")
                rows.append([algorithm, mode, m.info.get("worker_cache"), f"{s:.1f}",
                             "" if graph is None else f"{graph:.1f}", f"{epoch:.2f}",
                             f"{sent / 1e6:.1f}", f"{100 * sent / data_bytes:.2f}"])
        if rows:
            table(rows, ["algorithm", "worker_cache", "ran as", "fit s", "graph s",
                         "epoch s (median)", "scheduler MB", "% of data"])
        for i, (algorithm, _, _) in enumerate(runs):
            shared, local, by_value = (float(r[5]) for r in rows[3 * i:3 * i + 3])
            print(f"{algorithm}: epoch ratio local / shared: {local / shared:.2f} (row state "
                  f"and parameters sent by value every pass: {by_value / shared:.2f})")
        kills = {"dgmm": (a.k, a.epochs), "slk": (10, a.slk_epochs)}
        for algorithm in filter(None, a.kill_algorithms.split(",")) if a.kill_trials else ():
            kill_trials(cluster, uri, root, a, algorithm, *kills[algorithm])
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
