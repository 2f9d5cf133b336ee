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
    """Of ``modules``, those that ``module`` imports anywhere in its file."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
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


# -- the house guards (issue 84): plugins without cycles, modules of a readable size -------------
PLUGINS = os.path.join(ROOT, "plugins")
MAX_LINES = 400  # a module past this holds two things: split it by what they are
MAX_FIT_LINES = 60  # engine.fit, docstring included: the arguments checked, then drive()


def _plugin_modules() -> dict:
    """module name -> file, for every module of every built-in plugin (not its tests)."""
    out = {}
    for pkg in sorted(os.listdir(PLUGINS)):
        folder = os.path.join(PLUGINS, pkg)
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            continue
        for f in sorted(os.listdir(folder)):
            if f.endswith(".py"):
                out[pkg if f == "__init__.py" else f"{pkg}.{f[:-3]}"] = os.path.join(folder, f)
    return out


def plugin_imports_of(module: str, path: str, modules) -> set:
    """The plugin's own modules that ``module`` imports (its package's ``__init__`` left out:
    ``from . import name`` of a name it defines is no import of a module)."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    return imports_of(module, path, modules) - {package}


def test_no_plugin_module_imports_another_that_imports_it_back():
    modules = _plugin_modules()
    found = cycles({m: plugin_imports_of(m, p, modules) for m, p in modules.items()})
    assert not found, "plugin modules that import each other:\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_plugin_cycle_check_sees_a_function_level_import(tmp_path):
    pkg = tmp_path / "plug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    modules = {"plug": str(pkg / "__init__.py"), "plug.a": str(pkg / "a.py"),
               "plug.b": str(pkg / "b.py")}
    edges = {m: plugin_imports_of(m, p, modules) for m, p in modules.items()}
    assert edges["plug.b"] == {"plug.a"} and cycles(edges) == [["plug.a", "plug.b"]]


def test_every_module_of_the_package_and_the_plugins_stays_under_the_line_limit():
    files = list(_modules().values()) + list(_plugin_modules().values())
    long = sorted(f"{os.path.relpath(f, ROOT)}: {n} lines" for f in files
                  if (n := len(open(f).read().splitlines())) > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines:\n" + "\n".join(long)


def test_engine_fit_stays_short():
    path = os.path.join(PACKAGE, "run", "engine.py")
    fit = next(n for n in ast.parse(open(path).read()).body
               if isinstance(n, ast.FunctionDef) and n.name == "fit")
    assert fit.end_lineno - fit.lineno + 1 <= MAX_FIT_LINES
