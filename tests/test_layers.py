"""The package's folders are its stages, and imports run one way only: no module imports another
of a later stage, and no two modules import each other, even through a chain or inside a
function.  Read from the import statements (every one, also those inside functions).

Stages, first to last (a module may import its own stage and every earlier one):

    contract   streamclust/__init__, errors, algorithm, hookspecs, plugins
    base       streamclust/base/
    data       streamclust/data/
    summaries  streamclust/summaries/
    graph      streamclust/graph/
    model      streamclust/model/
    run        streamclust/run/
    faces      cli, sklearn, sweep, toolkit, testing
"""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "streamclust")
CONTRACT = {"streamclust", "streamclust.errors", "streamclust.algorithm", "streamclust.hookspecs",
            "streamclust.plugins"}
STAGES = ["contract", "base", "data", "summaries", "graph", "model", "run", "faces"]


def stage(module: str) -> str:
    if module in CONTRACT:
        return "contract"
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and os.path.isdir(os.path.join(PACKAGE, parts[1]))):
        return parts[1]
    return "faces"


def _modules() -> dict:
    """module name -> file, for every module of the package."""
    out = {}
    for dirpath, dirnames, files in os.walk(PACKAGE):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = os.path.join(dirpath, f)
    return out


def imports_of(module: str, path: str, modules) -> set:
    """The package's modules that ``module`` imports anywhere in its file."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "streamclust"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "streamclust":
                continue
            for a in node.names:  # `from . import checkpoint` imports the module checkpoint
                sub = f"{target}.{a.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != module}


def graph() -> dict:
    modules = _modules()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def upward(edges: dict) -> list:
    return sorted(f"{a} ({stage(a)}) imports {b} ({stage(b)})" for a, bs in edges.items() for b in bs
                  if STAGES.index(stage(b)) > STAGES.index(stage(a)))


def cycles(edges: dict) -> list:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_belongs_to_a_stage():
    for m in _modules():
        assert stage(m) in STAGES, f"{m}: a folder that is no stage ({stage(m)}); add it to STAGES"


def test_no_module_imports_a_later_stage():
    bad = upward(graph())
    assert not bad, "imports against the stages:\n" + "\n".join(bad)


def test_the_import_graph_has_no_cycle():
    found = cycles(graph())
    assert not found, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_catch_an_upward_import_and_a_cycle():
    edges = {"streamclust.data.cache": {"streamclust.run.engine"},
             "streamclust.run.engine": {"streamclust.data.cache"},
             "streamclust.base.atomic": {"streamclust.errors"}}
    assert upward(edges) == ["streamclust.data.cache (data) imports streamclust.run.engine (run)"]
    assert cycles(edges) == [["streamclust.data.cache", "streamclust.run.engine"]]
    real = graph()  # the reader sees relative, absolute and function-level imports
    assert "streamclust.data.cache" in real["streamclust.run.engine"]
    assert "streamclust.graph.knn" in real["streamclust.run.context"]  # inside a method
    assert "streamclust.run.checkpoint" in real["streamclust.run.engine"]  # `from . import x`
