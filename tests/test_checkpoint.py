"""Checkpoints and resume in the engine: a resumed fit equals an uninterrupted one (also after
SIGKILL at random points, in a subprocess), checkpoints of another run are refused, one run per
work directory.  Resume of each algorithm is a contract check (``check_resume``); the cases
specific to one algorithm live with its plugin (D-GMM with a coreset, SLK across a λ grid)."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import streamclust
from streamclust.base.workdir import WorkDirLock
from streamclust.run.checkpoint import find
from streamclust.errors import ParameterError, StreamclustError
from streamclust.testing import make_blobs

from conftest import write_parquet_dir

DGMM = dict(truncation=3, candidates=3, tol=1e-12)


def _data(tmp_path, n=3000):
    X, y = make_blobs(n=n, k=12, d=6, seed=11, spread=1.5)
    return write_parquet_dir(str(tmp_path / "data"), X, y, files=3, row_group=500)


def test_resume_after_a_stop_equals_an_uninterrupted_fit(tmp_path):
    data = _data(tmp_path)
    full = streamclust.fit(data, "dgmm", 12, features="embedding", max_epochs=8, batch_size=700,
                           progress=False, **DGMM)
    work = str(tmp_path / "w")
    part = streamclust.fit(data, "dgmm", 12, features="embedding", max_epochs=3, batch_size=700,
                           work_dir=work, progress=False, **DGMM)
    assert len(part.history) == 3 and find(work)
    done = streamclust.fit(data, "dgmm", 12, features="embedding", max_epochs=8, batch_size=700,
                           work_dir=work, resume=True, progress=False, **DGMM)
    assert done.info["resumed_from_epoch"] == 3
    assert [h["epoch"] for h in done.history] == list(range(8))
    np.testing.assert_allclose(done.means_, full.means_, rtol=1e-6)
    np.testing.assert_allclose(done.sigma2_, full.sigma2_, rtol=1e-6)
    assert [round(h["objective"], 9) for h in done.history] == \
        [round(h["objective"], 9) for h in full.history]


def test_checkpoints_are_spaced_by_their_cost_and_a_resume_from_any_of_them_is_the_same_fit(
        tmp_path, monkeypatch):
    """Spaced far apart, a run writes the checkpoints of its first and last epochs only (after
    every epoch when spaced by 0); a SIGKILL-like loss of the epochs after the first checkpoint
    then resumes from epoch 1 and still ends in the uninterrupted fit."""
    import shutil
    from streamclust.run import checkpoint as ck
    from streamclust.run import engine
    data = _data(tmp_path)
    kw = dict(features="embedding", batch_size=700, progress=False, **DGMM)
    full = streamclust.fit(data, "dgmm", 12, max_epochs=8, **kw)
    written = []
    real = ck.write
    monkeypatch.setattr(ck, "write", lambda wd, ident, epoch, *a: (written.append(epoch),
                                                                    real(wd, ident, epoch, *a)))
    for spacing, expect in ((0, [1, 2, 3, 4, 5]), (1e9, [1, 5])):
        monkeypatch.setattr(engine, "CHECKPOINT_SPACING", spacing)
        written.clear()
        streamclust.fit(data, "dgmm", 12, max_epochs=5, work_dir=str(tmp_path / f"w{spacing}"), **kw)
        assert written == expect
    # a run killed after its fourth epoch: its last checkpoint is the first epoch's
    work = str(tmp_path / "killed")
    streamclust.fit(data, "dgmm", 12, max_epochs=1, work_dir=work, **kw)
    saved = str(tmp_path / "first")
    shutil.copytree(os.path.join(work, "checkpoint"), saved)
    streamclust.fit(data, "dgmm", 12, max_epochs=4, work_dir=work, resume=True, **kw)
    shutil.rmtree(os.path.join(work, "checkpoint"))
    shutil.copytree(saved, os.path.join(work, "checkpoint"))
    done = streamclust.fit(data, "dgmm", 12, max_epochs=8, work_dir=work, resume=True, **kw)
    assert done.info["resumed_from_epoch"] == 1
    np.testing.assert_allclose(done.means_, full.means_, rtol=1e-6)
    assert [round(h["objective"], 9) for h in done.history] == \
        [round(h["objective"], 9) for h in full.history]


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    data = _data(tmp_path, 1000)
    work = str(tmp_path / "w")
    streamclust.fit(data, "dgmm", 12, features="embedding", max_epochs=2, work_dir=work,
                    progress=False, **DGMM)
    with pytest.raises(StreamclustError, match="different run .*params"):
        streamclust.fit(data, "dgmm", 12, features="embedding", max_epochs=4, work_dir=work,
                        resume=True, progress=False, **{**DGMM, "truncation": 4})
    with pytest.raises(ParameterError, match="cannot resume"):
        streamclust.fit(data, "kmeans", 2, features="embedding", work_dir=work, resume=True)
    with pytest.raises(ParameterError, match="work_dir"):
        streamclust.fit(data, "dgmm", 12, features="embedding", resume=True)


def test_a_fresh_fit_drops_the_row_state_an_earlier_fit_left(tmp_path):
    """Checkpoints copy every ``state_*`` file of the work directory: a fresh fit first removes
    those of an earlier fit (and its scratch), so they are not copied after every epoch."""
    data = _data(tmp_path, 1000)
    work = tmp_path / "w"
    streamclust.fit(data, "slk", 3, features="embedding", max_epochs=1, work_dir=str(work),
                    progress=False, n_init=1)
    assert any(n.startswith("state_slk_") for n in os.listdir(work))
    assert any(n.startswith("scratch_slk_") for n in os.listdir(work))
    streamclust.fit(data, "dgmm", 12, features="embedding", max_epochs=1, work_dir=str(work),
                    progress=False, **DGMM)
    left = os.listdir(work) + os.listdir(work / "checkpoint")
    assert not [n for n in left if "slk" in n], left


def test_a_work_directory_in_use_is_refused(tmp_path):
    data = _data(tmp_path, 500)
    work = str(tmp_path / "w")
    os.makedirs(work)
    with WorkDirLock(work):
        with pytest.raises(StreamclustError, match="in use by another run"):
            streamclust.fit(data, "dgmm", 4, features="embedding", work_dir=work, progress=False)
    m = streamclust.fit(data, "dgmm", 4, features="embedding", work_dir=work, progress=False)
    assert m.info["epochs"] >= 1  # the lock is released with the first run


def _cli(*args):
    return [sys.executable, "-m", "streamclust.cli", *args]


def test_sigkill_at_random_points_then_resume_equals_an_uninterrupted_run(tmp_path):
    X, y = make_blobs(n=200_000, k=30, d=8, seed=12, spread=2.0)
    data = write_parquet_dir(str(tmp_path / "data"), X, y, files=4, row_group=20_000)
    args = ["fit", data, "-a", "dgmm", "-k", "30", "-f", "embedding", "--max-epochs", "12",
            "--batch-size", "25000", "--set", "tol=1e-12", "-q"]
    env = dict(os.environ)
    t = time.perf_counter()
    ref_out = str(tmp_path / "ref")
    subprocess.run(_cli(*args, "--out", ref_out), check=True, env=env, capture_output=True)
    total = time.perf_counter() - t
    ref = streamclust.load_model(ref_out)
    rng = np.random.default_rng(2026)
    resumed = []
    for trial in range(int(os.environ.get("STREAMCLUST_KILL_TRIALS", 1))):  # (10: a soak)
        work, out = str(tmp_path / f"w{trial}"), str(tmp_path / f"m{trial}")
        p = subprocess.Popen(_cli(*args, "--work-dir", work, "--out", out), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120  # the kill falls after the first epoch's checkpoint (a
        while time.time() < deadline and p.poll() is None and \
                not os.path.exists(os.path.join(work, "checkpoint")):  # start-up of varying
            time.sleep(0.01)  # length made every kill of a run land before it, now and then)
        time.sleep(rng.uniform(0.0, 0.4) * total)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if os.path.exists(out):  # finished before the kill: the model must be complete
            streamclust.load_model(out)
        # --overwrite: the kill may have come after the model was written (an existing --out
        # is refused without it, also on --resume)
        r = subprocess.run(_cli(*args, "--work-dir", work, "--out", out, "--resume", "--overwrite"),
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        m = streamclust.load_model(out)
        np.testing.assert_allclose(m.means_, ref.means_, rtol=1e-6, err_msg=f"trial {trial}")
        np.testing.assert_allclose(m.sigma2_, ref.sigma2_, rtol=1e-6)
        assert len(m.history) == len(ref.history)
        assert not any(n.endswith(".tmp") for n in os.listdir(work)), os.listdir(work)
        resumed.append(m.info.get("resumed_from_epoch"))
    print("resumed from epochs:", resumed, f"(uninterrupted run {total:.1f} s)")
    assert any(resumed), f"no kill fell between epochs: {resumed}"
