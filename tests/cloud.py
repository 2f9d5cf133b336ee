"""A cloud cluster in a test: an S3 server (moto's, as s3fs and pandas test against), a Dask
scheduler, and workers in their own mount namespaces over which an empty tmpfs hides the
tests' temporary directories (the client's work directories), each worker with its own
``local_directory``.  A path of the client's that leaks to a worker fails there."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

BUCKET = "streamclust-test"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def can_hide() -> str | None:
    """None when this process may start workers in their own mount namespaces, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        "mount -t tmpfs none /mnt"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"unshare -m not permitted ({r.stderr.strip()})"


class Cloud:
    """The S3 server, the scheduler (in this process) and the workers (subprocesses)."""

    def __init__(self, hidden: str, n_workers: int = 2):
        from moto.server import ThreadedMotoServer
        import distributed
        for k, v in KEYS.items():
            os.environ.setdefault(k, v)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"{host}:{port}"
        import boto3  # (moto's own dependency)
        self.s3 = boto3.client("s3", endpoint_url=f"http://{self.endpoint}", region_name="us-east-1",
                               aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                               aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
        self.s3.create_bucket(Bucket=BUCKET)
        self.hidden = hidden
        self.cluster = distributed.LocalCluster(n_workers=0, host="127.0.0.1",
                                                dashboard_address=":0", processes=True)
        self.client = distributed.Client(self.cluster)
        self.local = tempfile.mkdtemp(prefix="streamclust-cloud-workers-")
        self.procs = []
        for i in range(n_workers):
            self.add_worker(f"w{len(self.procs)}")
        self.wait_for(n_workers)

    def uri(self, key: str) -> str:
        return f"s3://{BUCKET}/{key}?endpoint_override={self.endpoint}&scheme=http"

    def put_dir(self, local: str, key: str, names=None) -> str:
        """The files of ``local`` (or only ``names``) copied under ``key``; returns the URI of
        the folder."""
        for name in sorted(names or os.listdir(local)):
            with open(os.path.join(local, name), "rb") as src:  # (not pyarrow's multipart
                self.s3.put_object(Bucket=BUCKET, Key=f"{key}/{name}", Body=src.read())  # upload)
        return self.uri(key)

    def add_worker(self, name: str) -> subprocess.Popen:
        folder = os.path.join(self.local, name)
        os.makedirs(folder, exist_ok=True)
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", self.cluster.scheduler_address,
                  "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", name,
                  "--local-directory", folder]
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
               f'mount -t tmpfs none "{self.hidden}" && exec "$@"', "sh"] + worker
        env = dict(os.environ, **KEYS, NUMBA_NUM_THREADS="1")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def workers(self) -> dict:
        return dict(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])

    def wait_for(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while len(self.workers()) < n:
            if time.time() > deadline:
                pytest.fail(f"{n} Dask workers did not start in {timeout:.0f} s")
            time.sleep(0.1)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.client.close()
        self.cluster.close()
        self.server.stop()
        shutil.rmtree(self.local, ignore_errors=True)
