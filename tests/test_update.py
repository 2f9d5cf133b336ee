"""Updates of a fitted model with appended files (issue 46): quality against a refit, stable
cluster ids, nothing new, changed files, a kill during an update, algorithms without the hook."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

import streamclust
from streamclust.errors import DataError, ParameterError
from streamclust.run.update import match_ids


def _write(path, X, y):
    pq.write_table(pa.table({**{f"p{j}": X[:, j].astype(np.float32) for j in range(X.shape[1])},
                             "label": y}), path)


def _files(directory, parts, seed=0, k=6, drift=False, d=8, n=6000):
    """``parts`` Parquet files of blobs around the same ``k`` centres (with ``drift``, only the
    last file holds the k-th); returns (path, rows, labels) of each."""
    directory.mkdir(exist_ok=True)
    C = np.random.default_rng(seed).normal(0, 8, (k, d))
    out = []
    for f in range(parts):
        classes = np.arange(k - 1 if drift and f < parts - 1 else k)
        rng = np.random.default_rng([seed, f])
        y = rng.choice(classes, n)
        X = C[y] + rng.normal(0, 1, (n, d))
        p = str(directory / f"part-{f:02d}.parquet")
        _write(p, X, y)
        out.append((p, X, y))
    return out


def _grow(tmp_path, files, upto):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for p, _, _ in files[:upto]:
        if not (data / os.path.basename(p)).exists():
            shutil.copy(p, data)
    return str(data)


def test_match_ids_by_hand():
    """Old ids 0, 1, 2 (old rows 10 each); new clusters: 0 takes old 1 whole, 1 takes old 0 and
    old 2 (a merge), 2 holds no old row (it appeared).  Old 1 and old 0 persist (0 is the
    larger half of new 1 — ties go to the Hungarian pair), old 2 vanishes, new 2 gets id 5
    (next_id), never a reused 2."""
    old = np.repeat([0, 1, 2], 10)
    new = np.concatenate([np.full(10, 1), np.full(10, 0), np.full(10, 1)])
    ids, next_id, ev = match_ids(old, new, 3, next_id=5)
    assert ids[0] == 1 and ids[2] == 5 and ids[1] in (0, 2)
    assert next_id == 6 and ev["appeared"] == [5]
    assert ev["merged"] == [{"into": int(ids[1]), "from": [0, 2]}]
    assert ev["vanished"] == [2 if ids[1] == 0 else 0]
    # a split: old 0 (20 rows) into new 0 (12) and new 1 (8): 0 keeps its id, new 1 appears
    ids, _, ev = match_ids(np.zeros(20, int), np.r_[np.zeros(12, int), np.ones(8, int)], 2, 1)
    assert ids.tolist() == [0, 1] and ev["split"] == [{"from": 0, "into": [0, 1]}]


def test_a_kept_fit_keeps_every_id_also_of_a_cluster_no_sampled_row_falls_in():
    """Fitted ids 4, 7, 9; the sampled old rows fall in the first two clusters only.  Matched by
    rows, the third gets a new id (10) though the model is the same; an algorithm that kept
    its fitted model whole (``kept_fitted_``) keeps all three."""
    from types import SimpleNamespace
    from streamclust.run.update import _stable_ids
    internal = np.repeat([0, 1], 10)

    class Fake:  # the parts of a Model that _stable_ids touches
        def __init__(self, kept):
            self.algorithm_ = SimpleNamespace(
                predict=lambda X: SimpleNamespace(labels=internal[np.asarray(X)]), kept_fitted_=kept)
            self.n_clusters, self.history, self.cluster_ids = 3, [{}], None
            self.info = {"update": {"rows_added": 5}}

        def public_labels(self, labels):
            return np.asarray(self.cluster_ids)[labels]
    base = {"match_ids": np.arange(20), "match_labels": np.array([4, 7])[internal],
            "cluster_ids": [4, 7, 9], "next_id": 10}
    cache = SimpleNamespace(take=lambda ids: ids)
    for kept, want, appeared in ((False, [4, 7, 10], [10]), (True, [4, 7, 9], [])):
        m = Fake(kept)
        _stable_ids(m, base, cache)
        assert list(m.cluster_ids) == want and m.info["update"]["ids"]["appeared"] == appeared
        assert m.info["update"]["labels_kept"] == 1.0


def test_update_equals_a_refit_and_keeps_ids(tmp_path):
    """Two files fitted, a third of the same blobs added: the update's NMI equals a refit's,
    its squared error within 1 %, and every old row keeps its cluster id."""
    files = _files(tmp_path / "src", 3)
    data = _grow(tmp_path, files, 2)
    work = str(tmp_path / "work")
    m1 = streamclust.fit(data, "dgmm", 6, work_dir=work, exclude=["label"], progress=False)
    data = _grow(tmp_path, files, 3)
    m2 = streamclust.update(data, work, progress=False)
    refit = streamclust.fit(data, "dgmm", 6, exclude=["label"], progress=False)
    X = np.concatenate([f[1] for f in files])
    y = np.concatenate([f[2] for f in files])
    up, re = m2.evaluate(X, y), refit.evaluate(X, y)
    assert up["nmi"] >= re["nmi"] - 0.01
    assert up["quantization_error"] <= 1.01 * re["quantization_error"]
    old = X[:12000]
    assert (m1.predict(old) == m2.predict(old)).mean() >= 0.99
    assert m2.info["update"]["rows_added"] == 6000 and m2.info["rows"] == 18000
    assert m2.info["update"]["ids"]["appeared"] == [] and m2.cluster_ids.tolist() == list(range(6))


def test_drift_gets_a_new_id_and_persisting_clusters_keep_theirs(tmp_path):
    """The first files hold 5 of 6 blobs (k = 6 splits one of them); the added file also holds
    the sixth.  The update gives it a cluster of its own with an id never used (6), the blobs
    present before keep their ids on their old rows, and the model records the change."""
    files = _files(tmp_path / "src", 3, seed=3, drift=True)
    data = _grow(tmp_path, files, 2)
    work = str(tmp_path / "work")
    m1 = streamclust.fit(data, "dgmm", 6, work_dir=work, exclude=["label"], progress=False)
    m2 = streamclust.update(_grow(tmp_path, files, 3), work, progress=False)
    X, y = files[2][1], files[2][2]
    new_blob = m2.predict(X[y == 5])
    assert (new_blob == np.bincount(new_blob).argmax()).mean() > 0.99
    assert new_blob[0] == 6 and m2.info["update"]["ids"]["appeared"] == [6]
    old = np.concatenate([f[1] for f in files[:2]])
    before, after = m1.predict(old), m2.predict(old)
    assert adjusted_rand_score(before, after) > 0.8  # the split blob merged, the rest kept
    truth = np.concatenate([f[2] for f in files[:2]])
    for c in range(5):  # a blob that was one cluster keeps its id
        ids = np.unique(before[truth == c])
        if len(ids) == 1:
            assert (after[truth == c] == ids[0]).all()
    assert normalized_mutual_info_score(y, m2.predict(X)) > 0.99
    saved = streamclust.load_model(m2.save(str(tmp_path / "m2")))
    assert np.array_equal(saved.predict(X), m2.predict(X))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "streamclust.cli", *args], capture_output=True,
                          text=True)


def test_cli_nothing_new_changed_file_and_no_fit(tmp_path):
    files = _files(tmp_path / "src", 3)
    data = _grow(tmp_path, files, 2)
    work, out = str(tmp_path / "work"), str(tmp_path / "m")
    r = _cli("fit", data, "-k", "6", "-x", "label", "--work-dir", work, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    before = open(os.path.join(out, "model.json")).read()
    # nothing new: exit 0, one line, the model untouched, no new output
    r = _cli("fit", data, "--work-dir", work, "-o", str(tmp_path / "m2"), "--update", "-q")
    assert r.returncode == 0 and "already up to date" in r.stdout, r.stderr
    assert not (tmp_path / "m2").exists()
    r = _cli("fit", data, "--work-dir", work, "-o", str(tmp_path / "m2"), "--update")
    assert r.returncode == 0 and (r.stdout + r.stderr).count("already up to date") == 1, r
    assert not (tmp_path / "m2").exists()
    # nothing new, --out the existing model (a cron line without --overwrite): up to date, exit 0
    r = _cli("fit", data, "--work-dir", work, "-o", out, "--update", "-q")
    assert r.returncode == 0 and "already up to date" in r.stdout, r.stderr
    assert open(os.path.join(out, "model.json")).read() == before
    # an old file changed: one line naming it, nothing written
    _grow(tmp_path, files, 3)
    first = os.path.join(data, "part-00.parquet")
    os.utime(first, ns=(0, 0))
    base = open(os.path.join(work, "fitted", "base.json")).read()
    r = _cli("fit", data, "--work-dir", work, "-o", str(tmp_path / "m2"), "--update", "-q")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert first in r.stderr and "changed since the model was fitted" in r.stderr
    assert not (tmp_path / "m2").exists()
    assert open(os.path.join(work, "fitted", "base.json")).read() == base
    assert open(os.path.join(out, "model.json")).read() == before
    # a setting that differs from the fit's; an update without a fit
    r = _cli("fit", data, "-k", "7", "--work-dir", work, "-o", str(tmp_path / "m2"), "--update")
    assert r.returncode == 1 and "n_clusters=7 differs" in r.stderr
    r = _cli("fit", data, "--work-dir", str(tmp_path / "w2"), "-o", str(tmp_path / "m2"), "--update")
    assert r.returncode == 1 and "no such work directory" in r.stderr
    (tmp_path / "w3").mkdir()
    r = _cli("fit", data, "--work-dir", str(tmp_path / "w3"), "-o", str(tmp_path / "m2"), "--update")
    assert r.returncode == 1 and "no fitted model to update" in r.stderr


def _tree(root):
    """Every file under ``root`` with its size and modification time (the lock file aside)."""
    return {os.path.relpath(os.path.join(d, f), root): (os.path.getsize(os.path.join(d, f)),
                                                         os.stat(os.path.join(d, f)).st_mtime_ns)
            for d, _, names in os.walk(root) for f in names if "lock" not in f}


def test_cli_an_existing_out_is_checked_once_there_is_something_to_write(tmp_path):
    files = _files(tmp_path / "src", 3, n=2000)
    data = _grow(tmp_path, files, 2)
    work, out = str(tmp_path / "work"), str(tmp_path / "m")
    assert _cli("fit", data, "-k", "6", "-x", "label", "--work-dir", work, "-o", out,
                "-q").returncode == 0
    before = open(os.path.join(out, "model.json")).read()
    _grow(tmp_path, files, 3)
    state = _tree(work)
    r = _cli("fit", data, "--work-dir", work, "-o", out, "--update", "-q")
    assert r.returncode == 1 and f"{out}: exists; not overwritten" in r.stderr, r.stderr
    assert _tree(work) == state and open(os.path.join(out, "model.json")).read() == before
    r = _cli("fit", data, "--work-dir", work, "-o", out, "--update", "--overwrite", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rows_added"] == 2000, r.stderr
    assert streamclust.load_model(out).info["rows"] == 6000


def test_a_new_file_sorting_before_the_fitted_ones_is_named(tmp_path):
    files = _files(tmp_path / "src", 3)
    data = _grow(tmp_path, files, 2)
    work = str(tmp_path / "work")
    streamclust.fit(data, "dgmm", 6, work_dir=work, exclude=["label"], progress=False)
    shutil.copy(files[2][0], os.path.join(data, "part-00a.parquet"))
    with pytest.raises(DataError, match="part-00a.parquet: a new file that sorts before"):
        streamclust.update(data, work, progress=False)


def test_an_algorithm_without_the_hook_is_refused(tmp_path):
    pytest.importorskip("streamclust_kmeans")
    files = _files(tmp_path / "src", 3)
    data = _grow(tmp_path, files, 2)
    work = str(tmp_path / "work")
    streamclust.fit(data, "kmeans", 6, work_dir=work, exclude=["label"], progress=False)
    _grow(tmp_path, files, 3)
    with pytest.raises(ParameterError, match="'kmeans' cannot update a fitted model"):
        streamclust.update(data, work, progress=False)


KILLER = textwrap.dedent("""
    import os, signal, sys
    import streamclust
    from streamclust import hookimpl
    from streamclust.plugins import PluginHost

    class Killer:
        @hookimpl
        def streamclust_epoch_finished(self, run, report):
            if report["epoch"] == int(sys.argv[3]):  # (the checkpoint of the epoch before is written)
                os.kill(os.getpid(), signal.SIGKILL)

    host = PluginHost(extra_plugins=[Killer()])
    streamclust.update(sys.argv[1], sys.argv[2], host=host, progress=False)
""")


def test_sigkill_during_an_update_then_resume_equals_an_uninterrupted_update(tmp_path):
    files = _files(tmp_path / "src", 3, seed=3, drift=True)
    data = _grow(tmp_path, files, 2)
    works = [str(tmp_path / w) for w in ("ref", "killed")]
    for w in works:
        m = streamclust.fit(data, "dgmm", 6, work_dir=w, exclude=["label"], progress=False,
                            tol=1e-9, max_epochs=30)
    _grow(tmp_path, files, 3)
    ref = streamclust.update(data, works[0], progress=False)
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    kill_at = len(m.history) + 1  # the update's second epoch
    assert len(ref.history) > kill_at + 1
    r = subprocess.run([sys.executable, str(script), data, works[1], str(kill_at)],
                       capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    with open(os.path.join(works[1], "checkpoint", "checkpoint.json")) as f:
        assert "update_of" in json.load(f)["identity"]  # the kill fell inside the update
    done = streamclust.update(data, works[1], progress=False, resume=True)
    assert done.info["resumed_from_epoch"] > 0
    np.testing.assert_allclose(done.means_, ref.means_, rtol=1e-6)
    assert done.cluster_ids.tolist() == ref.cluster_ids.tolist()
    assert [h["epoch"] for h in done.history] == [h["epoch"] for h in ref.history]


@pytest.mark.parametrize("algorithm,k,params", [("dgmm", 6, {}), ("ncutemb", 6, {"epochs": 4})])
def test_an_update_on_dask_equals_the_local_one(tmp_path, algorithm, k, params):
    """The update's passes over the new rows (``ctx.rows_view``) go to the workers as row ranges
    of the cache; the result equals a local update (NCutEmb: SGD shares averaged, so quality)."""
    pytest.importorskip("distributed")
    from streamclust.run.dask_executor import DaskExecutor
    files = _files(tmp_path / "src", 3, seed=5, drift=algorithm == "dgmm")
    data = _grow(tmp_path, files, 2)
    works = [str(tmp_path / w) for w in ("local", "dask")]
    for w in works:
        streamclust.fit(data, algorithm, k, work_dir=w, exclude=["label"], progress=False, **params)
    _grow(tmp_path, files, 3)
    local = streamclust.update(data, works[0], progress=False)
    with DaskExecutor(scheduler="local", n_workers=2) as ex:
        remote = streamclust.update(data, works[1], progress=False, executor=ex)
    X = np.concatenate([f[1] for f in files])
    if algorithm == "dgmm":
        np.testing.assert_allclose(remote.means_, local.means_, rtol=1e-6, atol=1e-6)
        assert remote.cluster_ids.tolist() == local.cluster_ids.tolist()
    else:
        y = np.concatenate([f[2] for f in files])
        assert normalized_mutual_info_score(y, remote.predict(X)) >= \
            normalized_mutual_info_score(y, local.predict(X)) - 0.05


def test_a_scaled_fit_updates_with_its_statistics_and_a_later_fit_rescales(tmp_path):
    """--scale standard: the update scales the new rows with the fitted rows' statistics (the
    model's scaler is the fit's), and a fit afterwards in the same work directory computes the
    statistics of all rows again (the cache is not reused)."""
    files = _files(tmp_path / "src", 3)
    data = _grow(tmp_path, files, 2)
    work = str(tmp_path / "work")
    m1 = streamclust.fit(data, "dgmm", 6, work_dir=work, exclude=["label"], scale="standard",
                         progress=False)
    _grow(tmp_path, files, 3)
    m2 = streamclust.update(data, work, progress=False)
    assert m2.scaler.to_json() == m1.scaler.to_json()
    X = np.concatenate([f[1] for f in files])
    old = np.concatenate([f[1] for f in files[:2]])
    cache = np.memmap(os.path.join(work, "features.f32"), np.float32, "r", shape=X.shape)
    np.testing.assert_allclose(cache, m1.scaler.apply(X.astype(np.float32)), rtol=1e-5, atol=1e-5)
    m3 = streamclust.fit(data, "dgmm", 6, work_dir=work, exclude=["label"], scale="standard",
                         progress=False)
    np.testing.assert_allclose(m3.scaler.offset, X.astype(np.float32).astype(np.float64).mean(0),
                               rtol=1e-5, atol=1e-4)
    assert not np.allclose(m3.scaler.offset, old.mean(0), atol=1e-4)


def test_an_update_names_many_new_ids_by_count_and_runs():
    """A model of a thousand exemplars can gain hundreds in an update (INFEX on usps: 218 ids,
    every one printed twice before): the line gives how many and their runs; a short list
    stays a list."""
    from streamclust.run.update import ids_text
    assert ids_text([]) == "none" and ids_text([7, 3]) == "[3, 7]"
    assert ids_text(range(1046, 1264)) == "218 (1046-1263)"
    assert ids_text([1, 2, 3, 9, 11, 12, 20, 30, 40, 50, 60, 70]) == \
        "12 (1-3, 9, 11-12, 20, ..., 40, 50, 60, 70)"
