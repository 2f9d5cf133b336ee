"""Meta-tests: every hook is documented in docs/architecture.md and exercised by a test; the
README keeps exactly two set-up commands and .ci/run calls the second."""
import inspect
import os
import re

from streamclust import hookspecs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hooks():
    return [n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("streamclust_")]


def test_every_hook_documented_and_tested():
    arch = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    tests = "".join(open(os.path.join(ROOT, "tests", f)).read() for f in os.listdir(os.path.join(ROOT, "tests"))
                    if f.endswith(".py") and f != "test_docs.py")
    for name in _hooks():
        assert getattr(hookspecs, name).__doc__, name
        assert name in arch, f"{name} missing from docs/architecture.md"
        assert name in tests, f"{name} has no test"


def test_readme_quickstart_and_ci():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"## Quickstart.*?```(?:bash)?\n(.*?)```", readme, re.S).group(1)
    commands = [l for l in block.strip().splitlines() if l.strip() and not l.startswith("#")]
    assert len(commands) == 2, commands
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert commands[1].strip() in ci


# -- every command the docs show runs -------------------------------------------------------------
# Each page's `streamclust ...` lines (from ```bash blocks, `\` continuations joined) run in order
# in a fresh directory holding the inputs the docs name: `data/` (Parquet: id, label, x as a
# list column, segment, topic), `new-data/`, `big/`, `data.csv` (p0..p7, label), `lake/` (day=…/hour=…).  Commands that
# need what no test machine has are left out, each with its reason.
import glob  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402

NOT_RUN = {"tcp://": "a remote Dask scheduler"}


def _doc_commands(path):
    text = open(path).read()
    out = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("streamclust "):
                out.append(line)
    return out


def _pages():
    pages = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in
                                   glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [p for p in pages if _doc_commands(os.path.join(ROOT, p))]


def _inputs(where):
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from streamclust.testing import make_blobs
    X, y = make_blobs(n=1200, k=4, d=8, seed=3)
    X = X.astype(np.float32)
    rng = np.random.default_rng(0)
    segment = (y + rng.integers(0, 2, len(y))) % 2  # a clustering to find an alternative to
    for name in ("data", "new-data", "big"):
        os.makedirs(os.path.join(where, name))
        for part, rows in enumerate(np.array_split(np.arange(len(X)), 2)):
            t = pa.table({"id": pa.array(rows.astype(np.int64)), "label": pa.array(y[rows].astype(np.int64)),
                          "x": pa.FixedSizeListArray.from_arrays(pa.array(X[rows].reshape(-1)), X.shape[1]),
                          "segment": pa.array(segment[rows].astype(np.int64)),
                          "topic": pa.array(y[rows].astype(np.int64))})
            pq.write_table(t, os.path.join(where, name, f"part-{part}.parquet"))
    days = np.array(["2026-12-01", "2026-12-02", "2026-12-03"])[np.arange(len(X)) % 3]
    pq.write_to_dataset(pa.table({"id": np.arange(len(X)), "label": y.astype(np.int64), "day": days,
                                  "hour": np.arange(len(X)) % 4,
                                  "x": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), X.shape[1])}),
                        os.path.join(where, "lake"), partition_cols=["day", "hour"])
    cols = {f"p{j}": X[:, j] for j in range(X.shape[1])}
    pacsv.write_csv(pa.table({**cols, "label": y.astype(np.int64)}), os.path.join(where, "data.csv"))


@pytest.mark.parametrize("page", _pages())
def test_every_command_the_docs_show_runs(page, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from streamclust.cli import main
    _inputs(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    ran = 0
    for command in _doc_commands(os.path.join(ROOT, page)):
        if any(k in command for k in NOT_RUN):
            continue
        args = shlex.split(command, comments=True)[1:]
        if args[0] == "fit" and "--out" in args and "--resume" not in args:
            shutil.rmtree(args[args.index("--out") + 1], ignore_errors=True)  # alternatives, not a sequence
        if args[0] == "fit" and "--resume" in args:
            shutil.rmtree(args[args.index("--out") + 1], ignore_errors=True)  # as after a kill
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, f"{page}: `{command}` failed:\n{res.output}"
        ran += 1
    assert ran, f"{page}: no command ran"


def test_the_readme_is_short_and_links_every_docs_page():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.encode()) <= 10 * 1024, f"README.md is {len(readme.encode())} bytes (≤ 10 KB)"
    pages = sorted(os.path.relpath(p, ROOT) for p in
                   glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    missing = [p for p in pages if f"]({p})" not in readme]
    assert not missing, f"docs pages not linked from README.md: {missing}"


def test_no_first_person_in_the_docs():
    found = []
    for p in ["README.md"] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True):
        text = re.sub(r"`[^`]*`|```.*?```", "", open(os.path.join(ROOT, p)).read(), flags=re.S)
        found += [f"{os.path.relpath(p, ROOT)}: {m.group(0)!r}" for m in
                  re.finditer(r"(?<![\w=/])(I|I'\w+|[Mm]y|[Ww]e|[Oo]ur|[Uu]s)(?![\w=/])", text)]
    assert not found, "first person in the docs:\n" + "\n".join(found)


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_the_docs_resolves_and_the_architecture_page_is_short():
    pages = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in
                                   glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", open(os.path.join(ROOT, page)).read(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path \
                else os.path.join(ROOT, page)
            if not os.path.exists(full):
                broken.append(f"{page}: {target}")
            elif frag and full.endswith(".md"):
                heads = re.findall(r"^#+ (.*)$", open(full).read(), flags=re.M)
                if frag not in {_anchor(h) for h in heads}:
                    broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "links that do not resolve:\n" + "\n".join(broken)
    size = len(open(os.path.join(ROOT, "docs", "architecture.md")).read().encode())
    assert size <= 20 * 1024, f"docs/architecture.md is {size} bytes (≤ 20 KB)"
    size = len(open(os.path.join(ROOT, "docs", "benchmarks.md")).read().encode())
    assert size <= 15 * 1024, f"docs/benchmarks.md is {size} bytes (≤ 15 KB: current figures " \
        "and their commands; earlier runs go to the git log)"
