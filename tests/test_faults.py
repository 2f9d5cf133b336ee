"""Faults a pipeline operator fears (issue 20): damaged checkpoints, edited models.  Each case
failed on main before the fix: a truncated row-state copy was zero-extended by the memory map
and resumed from; an edited model.json loaded; SLK's λ of -1e6 was accepted."""
import json
import os

import numpy as np
import pytest

import streamclust
from streamclust.errors import ModelError, StreamclustError
from streamclust.testing import make_blobs

from conftest import write_parquet_dir
from test_bad_input import restamp


def _fit(tmp_path, epochs, **kw):
    X, y = make_blobs(n=2000, k=8, d=4, seed=2, spread=1.5)
    data = write_parquet_dir(str(tmp_path / "data"), X, y, files=2, row_group=500)
    return data, streamclust.fit(data, "dgmm", 8, features="embedding", max_epochs=epochs,
                                 work_dir=str(tmp_path / "w"), progress=False, truncation=3,
                                 candidates=3, tol=1e-12, n_init=1, **kw)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_checkpoint_row_state_is_refused(tmp_path, damage):
    data, _ = _fit(tmp_path, 2)
    ck = tmp_path / "w" / "checkpoint"
    states = sorted(ck.glob("state_*.npy"))
    assert states
    raw = states[0].read_bytes()
    if damage == "truncate":
        states[0].write_bytes(raw[: len(raw) // 2])
    else:
        states[0].write_bytes(raw[:-4] + bytes(b ^ 0xFF for b in raw[-4:]))
    with pytest.raises(StreamclustError, match=f"{states[0].name} does not match its "
                       f"{'size' if damage == 'truncate' else 'checksum'}"):
        streamclust.fit(data, "dgmm", 8, features="embedding", max_epochs=4,
                        work_dir=str(tmp_path / "w"), resume=True, progress=False, truncation=3,
                        candidates=3, tol=1e-12, n_init=1)
    states[0].write_bytes(raw)  # repaired: the resume goes on
    m = streamclust.fit(data, "dgmm", 8, features="embedding", max_epochs=4,
                        work_dir=str(tmp_path / "w"), resume=True, progress=False, truncation=3,
                        candidates=3, tol=1e-12, n_init=1)
    assert m.info["resumed_from_epoch"] == 2


def test_edited_model_json_is_refused(tmp_path):
    X, _ = make_blobs(n=300, k=3, d=2, seed=0)
    path = streamclust.fit(X, "dgmm", 3, progress=False).save(str(tmp_path / "m"))
    mj = os.path.join(path, "model.json")
    meta = json.load(open(mj))
    assert "sha256" in meta
    streamclust.load_model(path)
    for edit in (lambda m: m["state"].update(free_energy=1.0),
                 lambda m: m["params"].update(seed=7),
                 lambda m: m["history"][0].update(objective=0.0)):
        bad = json.loads(json.dumps(meta))
        edit(bad)
        with open(mj, "w") as f:
            json.dump(bad, f)
        with pytest.raises(ModelError, match="does not match its checksum"):
            streamclust.load_model(path)
    with open(mj, "w") as f:  # the original, re-indented: the checksum is of the content
        json.dump(meta, f, indent=4)
    streamclust.load_model(path)


def test_slk_lambda_outside_its_range_is_refused_at_load(tmp_path):
    X, _ = make_blobs(n=400, k=3, d=3, seed=1)
    path = streamclust.fit(X, "slk", 3, progress=False).save(str(tmp_path / "m"))
    mj = os.path.join(path, "model.json")
    meta = json.load(open(mj))
    meta["state"]["lambda_value"] = -1e6
    with open(mj, "w") as f:
        json.dump(restamp(meta), f)
    with pytest.raises(ModelError, match="lambda_value"):
        streamclust.load_model(path)


def _graph_data(tmp_path, n=3000):
    X, y = make_blobs(n=n, k=10, d=8, seed=5, spread=2.0)
    return X, write_parquet_dir(str(tmp_path / "gdata"), X, y, files=2, row_group=500)


def test_graph_bad_sizes_leave_nothing(tmp_path):
    """`graph -n 0` left a full feature cache in --out, `--batch-size 0` an empty directory."""
    from test_bad_input import run
    _, data = _graph_data(tmp_path, 500)
    for args, word in ((["-n", "0"], "--neighbors"), (["--batch-size", "0"], "--batch-size")):
        out = tmp_path / f"g{word}"
        code, text = run(["graph", data, "-f", "embedding", "--out", str(out), *args])
        # refused by the option's range (exit 2, the option named) before anything is written
        assert code == 2 and word in text and "Traceback" not in text, text
        assert not out.exists()


def test_graph_takes_the_work_directory_lock(tmp_path):
    """A graph build beside another writer of the directory (a fit, another graph) is refused
    with the holder named, and the directory's files are left as they were."""
    from streamclust.base.workdir import WorkDirLock
    from streamclust.run.graph_job import knn_graph
    _, data = _graph_data(tmp_path, 500)
    work = tmp_path / "w"
    work.mkdir()
    with WorkDirLock(str(work)):
        with pytest.raises(StreamclustError, match=f"pid {os.getpid()}"):
            knn_graph(data, 5, features="embedding", work_dir=str(work))
        assert sorted(os.listdir(work)) == [".streamclust.lock"]
    g = knn_graph(data, 5, features="embedding", work_dir=str(work))
    assert g.ids.shape == (500, 5)


def test_a_lock_held_for_a_moment_is_waited_for(tmp_path):
    """Another run's clean_stale holds a young work directory's lock for the moment it reads it
    (a fit of a parallel test suite was refused so, the lock file still empty): a lock released
    within the patience is taken; one held past it is refused."""
    import fcntl
    import threading
    from streamclust.base.workdir import LOCK, WorkDirLock
    work = tmp_path / "w"
    work.mkdir()
    other = open(work / LOCK, "a+")  # another open file: flock conflicts as another process's
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    threading.Timer(0.1, fcntl.flock, (other, fcntl.LOCK_UN)).start()
    with WorkDirLock(str(work)):
        assert (work / LOCK).read_text().startswith(f"pid {os.getpid()} ")
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with pytest.raises(StreamclustError, match="in use by another run"):
        WorkDirLock(str(work)).__enter__()
    other.close()


def test_concurrent_graph_and_fit_on_one_work_directory(tmp_path):
    """`graph` and an SLK fit started together on one --work-dir (on main: FileNotFoundError on
    graph_ids.tmp.npy, SIGSEGV in the fit): each finishes or stops with the lock's message, and
    the graph left there is complete and right (recall@5 against brute force)."""
    import subprocess
    import sys
    from scipy.spatial.distance import cdist
    from streamclust.graph.knn import KNN_DIR, META, KNNGraph
    X, data = _graph_data(tmp_path)
    work = str(tmp_path / "w")
    cli = [sys.executable, "-m", "streamclust.cli"]
    procs = [subprocess.Popen(cli + ["graph", data, "-f", "embedding", "-n", "5", "--out", work],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
             subprocess.Popen(cli + ["fit", data, "-a", "slk", "-k", "10", "-f", "embedding", "-q",
                                     "--work-dir", work, "--out", str(tmp_path / "model")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0 or (p.returncode == 1 and "in use by another run" in out), out
        assert "Traceback" not in out, out
    assert any(p.returncode == 0 for p in procs)
    if os.path.exists(os.path.join(work, KNN_DIR, "graph_ids.npy")):
        g = KNNGraph.load(os.path.join(work, KNN_DIR))
        # the graph of the rows as cached for the run that wrote it: raw (graph) or unit-norm
        # (SLK's default l2 transform; it does not reuse a graph of the raw rows)
        with open(os.path.join(work, KNN_DIR, META)) as f:
            cached = json.loads(json.load(f)["cache"])
        X = X / np.linalg.norm(X, axis=1, keepdims=True) if cached["transform"] == "l2" else X
        D = cdist(X.astype(np.float32), X.astype(np.float32), "sqeuclidean")
        np.fill_diagonal(D, np.inf)
        true = np.argsort(D, axis=1)[:, :g.n_neighbors]
        recall = np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(g.ids, true)])
        assert recall > 0.9


def test_sigterm_cleans_up_like_ctrl_c(tmp_path):
    """SIGTERM mid-fit (on main: the temporary work directory and its feature cache were left in
    $TMPDIR): exit 143, nothing left in $TMPDIR, no model written."""
    import signal
    import subprocess
    import sys
    import time
    X, y = make_blobs(n=600_000, k=20, d=16, seed=3)
    data = write_parquet_dir(str(tmp_path / "big"), X, y, files=6, row_group=20000)
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    p = subprocess.Popen([sys.executable, "-m", "streamclust.cli", "fit", data, "-k", "20", "-f",
                          "embedding", "-q", "--max-epochs", "1000", "--set", "tol=1e-300",
                          "--batch-size", "500", "--out", str(tmp_path / "model")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp.glob("streamclust-*/features.f32*")):
        time.sleep(0.005)  # the cache pass has begun (features.f32.tmp) or is done
    assert list(tmp.glob("streamclust-*/features.f32*")), "the fit never began its cache"
    p.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 143, out
    assert "terminated" in out and "Traceback" not in out, out
    left = [q.name for q in tmp.iterdir() if q.name.startswith(("streamclust", ".streamclust"))]
    assert left == [] and not (tmp_path / "model").exists(), (left, out)


def test_stale_work_directories_of_dead_runs_are_removed(tmp_path, monkeypatch, caplog):
    import tempfile
    import time
    from streamclust.base.workdir import LOCK, WorkDirLock
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, alive, young = (tmp_path / f"streamclust-{n}" for n in ("dead", "alive", "young"))
    for d in (dead, alive, young):
        d.mkdir()
        (d / LOCK).write_text("pid 999999999")
        (d / "features.f32").write_bytes(b"\0" * 64)
    old = time.time() - 3600
    for d in (dead, alive):
        os.utime(d / LOCK, (old, old))
    X, _ = make_blobs(n=200, k=2, d=2, seed=0)
    import logging
    with WorkDirLock(str(alive)):
        os.utime(alive / LOCK, (old, old))
        with caplog.at_level(logging.DEBUG, logger="streamclust"):
            streamclust.fit(X, "dgmm", 2, progress=False)
    assert "dead runs: " in caplog.text and "streamclust-dead" in caplog.text
    assert not dead.exists() and alive.exists() and young.exists()


def test_a_killed_fit_leaves_nothing_after_the_next_command(tmp_path, blob_dir):
    """A fit without --work-dir SIGKILLed: its temporary work directory (the whole feature
    cache) is removed by the next streamclust command, whatever it is; the directory of a live
    run is kept.  A killed writer's temporary output is removed by the next write of that file."""
    import signal
    import subprocess
    import sys
    import time
    from streamclust.base.workdir import WorkDirLock, owner_tag
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    cli = [sys.executable, "-m", "streamclust.cli"]
    p = subprocess.Popen(cli + ["fit", blob_dir, "-k", "4", "-f", "embedding", "--max-epochs", "100000",
                                "--set", "tol=0", "--out", str(tmp_path / "m"), "-q"], env=env)
    deadline = time.time() + 60
    while time.time() < deadline and not any(
            (d / ".streamclust.lock").exists() and (d / ".streamclust.lock").read_text()
            for d in tmp.iterdir()):
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    p.wait()
    left = [d.name for d in tmp.iterdir()]
    assert left and all(n.startswith("streamclust-") for n in left)
    live = tmp / "streamclust-live"
    live.mkdir()
    with WorkDirLock(str(live)):
        r = subprocess.run(cli + ["info", blob_dir], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert [d.name for d in tmp.iterdir()] == ["streamclust-live"]  # the killed run's is gone
    out = tmp_path / "p.parquet"
    dead_tmp = tmp_path / f".p.parquet.999999999-1.abc.tmp"
    live_tmp = tmp_path / f".p.parquet.{owner_tag()}.xyz.tmp"
    dead_tmp.write_bytes(b"partial")
    live_tmp.write_bytes(b"partial")
    streamclust.fit(blob_dir, "dgmm", 4, features="embedding", progress=False).predict_to_parquet(
        blob_dir, str(out))
    assert out.exists() and not dead_tmp.exists() and live_tmp.exists()


def test_list_label_column_is_named(tmp_path):
    """evaluate with a list<int> label column (on main: TypeError: unhashable type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    X, y = make_blobs(n=300, k=3, d=2, seed=0)
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"x0": X[:, 0], "x1": X[:, 1],
                             "tags": pa.array([[int(v)] for v in y], pa.list_(pa.int64()))}), path)
    m = streamclust.fit(path, "dgmm", 3, features=["x0", "x1"], progress=False)
    with pytest.raises(streamclust.DataError, match="label column 'tags' is of type list"):
        m.evaluate(path, "tags")


def test_an_out_path_that_cannot_be_created_fails_before_the_fit(tmp_path):
    """--out under a file (on main: found when the model was saved, after the whole fit)."""
    from test_bad_input import run
    X, y = make_blobs(n=300, k=3, d=2, seed=0)
    data = write_parquet_dir(str(tmp_path / "d"), X, y, files=1)
    (tmp_path / "afile").write_text("x")
    code, text = run(["fit", data, "-k", "3", "-f", "embedding", "-q",
                      "--out", str(tmp_path / "afile" / "sub" / "model")])
    assert code == 1 and "is a file, not a directory" in text, text
    assert "epoch" not in text


def test_a_dropped_sigterm_exception_still_stops_at_the_next_batch():
    """The handler's exception can be dropped (raised inside a __del__); the flag it sets stops
    the pass at the next batch."""
    from streamclust.run.executor import LocalExecutor
    from streamclust.base.interrupt import TERMINATED, Terminated
    from streamclust.data.sources import open_data
    X = np.zeros((100, 2), np.float32)
    TERMINATED.set()
    try:
        with pytest.raises(Terminated):
            LocalExecutor().aggregate(lambda b, s, p: 1, open_data(X), None, batch_size=10)
    finally:
        TERMINATED.clear()
    assert LocalExecutor().aggregate(lambda b, s, p: 1, open_data(X), None, batch_size=10) == 10


@pytest.mark.parametrize("command,option,value", [
    ("fit", "--batch-size", "0"), ("fit", "--max-epochs", str(2**63)), ("fit", "-k", str(2**63)),
    ("fit", "--seed", str(2**63)), ("predict", "--batch-size", "0"),
    ("graph", "--neighbors", str(2**63)), ("graph", "--cell-rows", str(2**63)),
    ("graph", "--batch-size", "-1")])  # a batch above memory is lowered (test_memory_limit)
def test_an_integer_option_out_of_range_is_one_line_naming_it(blob_dir, tmp_path, command, option,
                                                               value):
    from click.testing import CliRunner

    from streamclust.cli import main
    args = {"fit": ["fit", blob_dir, "-k", "4", "-f", "embedding", "--out", str(tmp_path / "m")],
            "predict": ["predict", str(tmp_path / "m"), blob_dir, "--out", str(tmp_path / "p.parquet")],
            "graph": ["graph", blob_dir, "--out", str(tmp_path / "g")]}[command]
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "Invalid value for" in res.output and f"'{option}'" in res.output, res.output
    assert "not in the range" in res.output
    assert "Traceback" not in res.output and os.listdir(tmp_path) == ["data"]  # nothing written


def test_an_integer_argument_out_of_range_is_refused_in_python():
    X, _ = make_blobs(n=100, k=2, d=2, seed=0)
    for name in ("batch_size", "max_epochs"):
        with pytest.raises(streamclust.ParameterError, match=f"{name} must be an integer from 1"):
            streamclust.fit(X, "dgmm", 2, progress=False, **{name: 2**63})


def test_resume_of_a_complete_fit_says_so_and_leaves_the_model(tmp_path, blob_dir):
    from click.testing import CliRunner

    from streamclust.cli import main
    out = str(tmp_path / "m")
    args = ["fit", blob_dir, "-k", "4", "-f", "embedding", "--work-dir", str(tmp_path / "w"),
            "--out", out, "-q", "--max-epochs", "5"]
    assert CliRunner().invoke(main, args).exit_code == 0
    before = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    res = CliRunner().invoke(main, args + ["--resume"])
    assert res.exit_code == 0, res.output
    assert "already complete" in res.output
    assert {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} == before
    other = CliRunner().invoke(main, [a if a != "4" else "5" for a in args] + ["--resume"])
    assert other.exit_code != 0 and "not overwritten" in other.output  # another k: not this model


def test_a_second_writer_of_an_output_is_refused_at_once(tmp_path, blob_dir):
    """fit --out and predict --out take the output's lock before anything else: a second writer
    of the same output gets one line at once (on main: a predict replaced the other's file, a
    fit failed at its end after all its epochs)."""
    from click.testing import CliRunner

    from streamclust.base.workdir import output_lock
    from streamclust.cli import main
    model = str(tmp_path / "m")
    assert CliRunner().invoke(main, ["fit", blob_dir, "-k", "4", "-f", "embedding", "-o", model, "-q"]).exit_code == 0
    for args, out in ((["fit", blob_dir, "-k", "4", "-f", "embedding", "-q"], str(tmp_path / "m2")),
                      (["predict", model, blob_dir], str(tmp_path / "p.parquet"))):
        with output_lock(out):
            res = CliRunner().invoke(main, args + ["--out", out])
        assert res.exit_code == 1 and "being written by another run (pid" in res.output, res.output
        assert not os.path.exists(out) and "Traceback" not in res.output
    assert sorted(os.listdir(tmp_path)) == ["data", "m"]  # the lock files went with their holders


def test_graph_never_removes_a_directory_another_run_holds(tmp_path, monkeypatch):
    """Two `graph --out g0` at once: the one that lost the lock removed g0, which the other had
    just filled (on main, now and then: FileNotFoundError for g0/features.f32.tmp)."""
    import streamclust.base.workdir as wd
    _, data = _graph_data(tmp_path, 500)
    g0 = tmp_path / "g0"

    def held(self):  # the directory's lock is held by another run
        raise StreamclustError(f"{os.path.dirname(self.path)}: the work directory is in use")
    monkeypatch.setattr(wd.WorkDirLock, "__enter__", held)
    with pytest.raises(StreamclustError, match="in use"):
        streamclust.knn_graph(data, 5, features="embedding", work_dir=str(g0))
    assert g0.exists()  # this run made it, but the lock holder owns it now
