"""Progress bars: tqdm when shown, otherwise a no-op bar (importing tqdm.auto costs ~12 ms,
a noticeable share of a small CLI fit)."""
from __future__ import annotations

import sys


class _Quiet:
    """What the engine calls on a bar, doing nothing."""

    def update(self, n=1):
        pass

    def set_postfix(self, *args, **kw):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def enabled(progress) -> bool:
    """Whether a bar is shown: ``progress`` None means when stderr is a terminal, else its
    truth (False: ``-q``)."""
    return _terminal() if progress is None else bool(progress)


def _terminal() -> bool:
    return sys.stderr.isatty()


def bar(show: bool, **kw):
    """A tqdm bar on stderr when ``show``, else a no-op one."""
    if not show:
        return _Quiet()
    from tqdm.auto import tqdm
    return tqdm(file=sys.stderr, **kw)
