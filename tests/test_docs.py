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
