"""Plugins import only the declared public API: ``streamclust`` (the contract),
``streamclust.toolkit`` and ``streamclust.testing``.  Checked on every Python file under
``plugins/`` and ``examples/`` (their tests included), by reading the import statements."""
import ast
import os

import pytest

import streamclust
import streamclust.testing
import streamclust.toolkit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC = {"streamclust": streamclust, "streamclust.toolkit": streamclust.toolkit,
          "streamclust.testing": streamclust.testing}


def _sources():
    for top in ("plugins", "examples"):
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d not in ("build", "__pycache__")]
            for f in files:
                if f.endswith(".py"):
                    yield os.path.join(dirpath, f)


def _violations(path):
    tree = ast.parse(open(path).read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("streamclust.") and a.name not in PUBLIC:
                    out.append(f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and (node.module == "streamclust" or node.module.startswith("streamclust.")):
            mod = PUBLIC.get(node.module)
            if mod is None:
                out.append(f"from {node.module} import ...")
                continue
            public = set(getattr(mod, "__all__", ()))
            out += [f"from {node.module} import {a.name}" for a in node.names
                    if node.module != "streamclust.testing" and a.name not in public]
    return [f"{os.path.relpath(path, ROOT)}:{v}" for v in out]


def test_plugins_and_examples_use_only_the_public_api():
    found = [v for p in _sources() for v in _violations(p)]
    assert not found, "imports outside the public API:\n" + "\n".join(found)


def test_the_check_catches_a_private_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from streamclust.base.distances import nearest_center\n"
                   "from streamclust import run\nimport streamclust.base.rng\n"
                   "from streamclust.toolkit import nearest_center\n")
    assert len(_violations(str(bad))) == 3


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_exists_and_is_documented(module):
    mod = PUBLIC[module]
    doc = open(os.path.join(ROOT, "docs", "toolkit.md")).read()
    for name in getattr(mod, "__all__", ()):
        assert hasattr(mod, name), f"{module}.{name} is declared but missing"
        if module == "streamclust.toolkit":
            assert f"`{name}" in doc, f"{module}.{name} is not on docs/toolkit.md"
