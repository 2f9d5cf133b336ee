"""The report page (issue 21): what it says is checked against independent counts, it needs
nothing at view time, and it renders in a real headless Chromium (screenshot not blank, every
plot drawn, no console errors)."""
import os
import re
import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.metrics.cluster import contingency_matrix

import streamclust
from streamclust.cli import main
from streamclust.testing import make_blobs

pytest.importorskip("matplotlib")


def _data(tmp_path, n=3000, k=4):
    X, y = make_blobs(n=n, k=k, d=5, seed=4)
    t = pa.table({**{f"x{j}": X[:, j] for j in range(5)}, "label": y.astype(np.int64),
                  "id": np.arange(n)})
    path = str(tmp_path / "d.parquet")
    pq.write_table(t, path, row_group_size=700)
    return X, y, path


def test_report_states_what_the_data_say(tmp_path):
    X, y, path = _data(tmp_path)
    m = streamclust.fit(path, "dgmm", 4, progress=False, coreset_size=500)
    m.save(str(tmp_path / "m"))
    out = str(tmp_path / "r.html")
    code = CliRunner().invoke(main, ["report", str(tmp_path / "m"), path, "--labels", "label",
                                     "-o", out, "--sample", "500", "--batch-size", "333"])
    assert code.exit_code == 0, code.output
    page = open(out, encoding="utf-8").read()
    # self-contained: no script, nothing fetched (the SVG namespace is a name, not a request;
    # matplotlib's markers are references within the page, "#...")
    assert "<script" not in page and not re.search(r"(src|href)\s*=\s*[\"'](?!#)", page)
    assert "xlink:href=\"#" in page
    assert page.count("<svg") == 3  # history, sizes, projection
    labels = m.predict(X)
    sizes = np.bincount(labels, minlength=4)
    assert f"largest {sizes.max()}, smallest {sizes.min()} rows" in page
    C = contingency_matrix(y, labels)
    for i in range(C.shape[0]):  # every confusion row: the class, its counts, its total
        cells = "".join(f"<td>{v}</td>" for v in C[i, np.argsort(-sizes, kind="stable")])
        assert f'<td class="k">{i}</td>{cells}<td>{C[i].sum()}</td>' in page
    # the sample: the same rows at any batch size
    from streamclust.model.report import scan
    a = scan(m, path, sample=400, batch_size=97)
    b = scan(m, path, sample=400, batch_size=5000)
    np.testing.assert_array_equal(a["sample"], b["sample"])
    assert len(np.unique(a["sample"], axis=0)) == 400
    # an existing page is not overwritten; an input never
    code = CliRunner().invoke(main, ["report", str(tmp_path / "m"), "-o", out])
    assert code.exit_code == 1 and "exists" in code.output
    code = CliRunner().invoke(main, ["report", str(tmp_path / "m"), path, "-o", path, "--overwrite"])
    assert code.exit_code == 1 and "is an input file" in code.output
    # without DATA the page holds the model alone, and says so (not "0 rows")
    code = CliRunner().invoke(main, ["report", str(tmp_path / "m"), "-o", str(tmp_path / "alone.html")])
    assert code.exit_code == 0 and "the model alone" in code.output and "0 rows" not in code.output
    assert open(str(tmp_path / "alone.html"), encoding="utf-8").read().count("<svg") == 1


@pytest.mark.parametrize("algo,k,kw", [("dgmm", 3, {}), ("slk", 3, {"n_neighbors": 5}),
                                       ("ism", 3, {}), ("ncutemb", 3, {"n_neighbors": 5, "epochs": 4}),
                                       ("infex", None, {"bandwidth": 1.5})])
def test_every_builtin_algorithm_has_its_curves_on_the_page(tmp_path, algo, k, kw):
    X, y = make_blobs(n=400, k=3, d=3, seed=1)
    m = streamclust.fit(X, algo, k, progress=False, **kw)
    res = m.report(str(tmp_path / "r.html"), X)
    page = open(res["out"], encoding="utf-8").read()
    from streamclust.model.report import curves
    names = curves(m.history)
    assert names, "no curve in the history"
    for name in names:  # every numeric series of the history has its panel, titled
        assert f">{name}<" in page, name
    assert page.count("<svg") == 3


def _chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        if os.environ.get("STREAMCLUST_BROWSER_TEST") == "required":
            pytest.fail("Chromium is required here (STREAMCLUST_BROWSER_TEST=required) but absent")
        pytest.skip("no Chromium (bash .ci/install-browser installs Debian's package)")
    return exe


def test_the_page_renders_in_a_real_browser(tmp_path):
    exe = _chromium()
    X, y, path = _data(tmp_path)
    m = streamclust.fit(path, "dgmm", 4, progress=False, coreset_size=500)
    out = str(tmp_path / "r.html")
    m.report(out, path, labels="label")
    shot = str(tmp_path / "shot.png")
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--window-size=1200,2400", f"--user-data-dir={tmp_path / 'profile'}"]
    r = subprocess.run(base + ["--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                               "file://" + out], capture_output=True, text=True, timeout=120)
    assert os.path.exists(shot), r.stderr[-2000:]
    assert "CONSOLE" not in r.stderr and "Failed to load" not in r.stderr, r.stderr[-2000:]
    import matplotlib.image as mpimg
    img = mpimg.imread(shot)[..., :3]
    ink = (img.mean(axis=2) < 0.9).mean()  # share of pixels that are not (near) white
    assert 0.02 < ink < 0.6, ink
    assert len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 30  # colours
    dom = subprocess.run(base + ["--dump-dom", "file://" + out], capture_output=True, text=True,
                         timeout=120).stdout
    assert dom.count("<svg") == 3 and "<h2>Projection</h2>" in dom
    # the drawn projection: one marker per sampled row in the rendered SVG
    assert dom.count("<use ") + dom.count("<path ") > 500
