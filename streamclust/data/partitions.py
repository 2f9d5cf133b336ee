"""A data lake's partition columns: Parquet files under Hive-style ``key=value`` directories
(``lake/day=2026-12-01/part-0.parquet``, as Spark, DuckDB's ``PARTITION_BY``, pyarrow's
``write_to_dataset`` and polars write them) read with ``key`` as a column of every row of the
file, typed as pyarrow's discovery types it (int32 where every value is an integer, else string;
``__HIVE_DEFAULT_PARTITION__`` is null).  A key that is also a column inside the files is the
files' column.

``where`` (:func:`parse_where`; :func:`streamclust.lake`) keeps the files whose partition values match an
expression on those columns: only they are opened and read.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import DataError


@dataclass
class Partitions:
    """The partition columns (``fields``) of a source's files and each file's values."""

    fields: tuple
    values: list  # one dict {name: value} per file

    @property
    def names(self) -> tuple:
        return tuple(f.name for f in self.fields)

    def part(self, first: int, stop: int) -> "Partitions":
        return Partitions(self.fields, self.values[first:stop])

    def kept(self, mask) -> "Partitions":
        """The files where ``mask`` is true."""
        return Partitions(self.fields, [v for v, k in zip(self.values, mask) if k])

    def table(self) -> pa.Table:
        """One row per file: its partition values."""
        return pa.table({f.name: pa.array([v.get(f.name) for v in self.values], f.type)
                         for f in self.fields})

    def constants(self, i: int, n: int, names) -> dict:
        """The columns ``names`` of file ``i`` for a batch of ``n`` rows: its values repeated."""
        fields = {f.name: f for f in self.fields}
        return {c: pa.repeat(pa.scalar(self.values[i].get(c), fields[c].type), n) for c in names}


def root_of(path: str) -> str | None:
    """The directory whose sub-directories hold the partition keys: ``path`` itself for a
    directory, the fixed part of a glob; None for one file."""
    if any(ch in path for ch in "*?["):
        cut = min(path.index(ch) for ch in "*?[" if ch in path)
        return os.path.dirname(path[:cut]) or "."
    return path


def discover(files, root: str | None, fs=None) -> Partitions | None:
    """The partition columns of ``files`` below ``root``, typed by pyarrow's Hive discovery from
    the paths alone (no file is opened); None when no file lies under a ``key=value``
    directory."""
    if root is None or not files:
        return None
    base = root.rstrip("/") + "/"
    rel = [f[len(base):] if f.startswith(base) else "" for f in files]
    if not any("=" in seg for r in rel for seg in r.split("/")[:-1]):
        return None
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    opts = ds.FileSystemFactoryOptions(partition_base_dir=root.rstrip("/"))
    opts.partitioning_factory = ds.HivePartitioning.discover(infer_dictionary=False)
    try:
        factory = ds.FileSystemDatasetFactory(fs or pafs.LocalFileSystem(), list(files),
                                              ds.ParquetFileFormat(), opts)
        dataset = factory.finish(factory.inspect(fragments=0))  # the paths' keys only
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{root}: cannot read its key=value directories as partition columns "
                        f"({type(e).__name__}: {e})") from e
    keys = list(dataset.schema)
    if not keys:
        return None
    values = [ds.get_partition_keys(fr.partition_expression) for fr in dataset.get_fragments()]
    if len(values) != len(files):  # pragma: no cover - pyarrow keeps one fragment per file
        raise DataError(f"{root}: {len(values)} fragments for {len(files)} files")
    return Partitions(tuple(keys), [{k.name: v.get(k.name) for k in keys} for v in values])


def without(parts: Partitions | None, names) -> Partitions | None:
    """``parts`` less the keys that are columns of the files (the files' column wins)."""
    if parts is None:
        return None
    keys = tuple(f for f in parts.fields if f.name not in names)
    return Partitions(keys, [{f.name: v.get(f.name) for f in keys} for v in parts.values]) \
        if keys else None


_TOKEN = re.compile(r"""\s*(?:(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w.]))
                        |(?P<str>'(?:[^']|'')*')|(?P<quoted>"(?:[^"]|"")*")
                        |(?P<op><=|>=|!=|<>|==|=|<|>|\(|\)|,)|(?P<name>[A-Za-z_][\w.]*))""", re.X)
_COMPARE = {"=": "__eq__", "==": "__eq__", "!=": "__ne__", "<>": "__ne__", "<": "__lt__",
            "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _tokens(text: str) -> list:
    out, at = [], 0
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            if not text[at:].strip():
                break
            raise DataError(f"where: cannot read {text[at:].strip()[:20]!r} (at character {at + 1} "
                            f"of {text!r})")
        kind = m.lastgroup
        v = m.group(kind)
        if kind == "num":
            v = float(v) if any(c in v for c in ".eE") else int(v)
        elif kind == "str":
            v = v[1:-1].replace("''", "'")
        elif kind == "quoted":
            kind, v = "name", v[1:-1].replace('""', '"')
        elif kind == "name" and v.lower() in ("and", "or", "not", "in", "is", "null", "true", "false"):
            kind, v = "word", v.lower()
        out.append((kind, v))
        at = m.end()
    return out


class _Parser:
    """``expr := conj (or conj)*``, ``conj := term (and term)*``, ``term := not term | ( expr )
    | name op literal | name [not] in (literal, …) | name is [not] null``."""

    def __init__(self, text: str):
        self.text, self.toks, self.i, self.names = text, _tokens(text), 0, []

    def peek(self, *want):
        """The next token when it is of a kind in ``want`` ("num", "str", "name") or an
        operator / keyword in ``want``; else None.  A quoted value or name never reads as a
        keyword."""
        t = self.toks[self.i] if self.i < len(self.toks) else (None, None)
        return t if t[0] in want or (t[0] in ("op", "word") and t[1] in want) else None

    def accept(self, *want) -> bool:
        """Step over the next token when :meth:`peek` finds it."""
        if self.peek(*want):
            self.i += 1
            return True
        return False

    def take(self, *want, what="a value"):
        t = self.peek(*want)
        if t is None or t[0] is None:
            got = self.toks[self.i][1] if self.i < len(self.toks) else "the end"
            raise DataError(f"where: expected {what}, found {got!r} in {self.text!r}")
        self.i += 1
        return t

    def expr(self):
        e = self.conj()
        while self.accept("or"):
            e = e | self.conj()
        return e

    def conj(self):
        e = self.term()
        while self.accept("and"):
            e = e & self.term()
        return e

    def literal(self):
        kind, v = self.take("num", "str", "true", "false", what="a number or a 'quoted' value")
        return {"true": True, "false": False}.get(v, v) if kind == "word" else v

    def term(self):
        import pyarrow.compute as pc
        if self.accept("not"):
            return ~self.term()
        if self.accept("("):
            e = self.expr()
            self.take(")", what="')'")
            return e
        name = self.take("name", what="a column name")[1]
        self.names.append(name)
        field = pc.field(name)
        if self.accept("is"):
            negate = self.accept("not")
            self.take("null", what="null")
            return ~field.is_null() if negate else field.is_null()
        negate = self.accept("not")
        if self.accept("in"):
            self.take("(", what="'('")
            values = [self.literal()]
            while self.accept(","):
                values.append(self.literal())
            self.take(")", what="')'")
            return ~field.isin(values) if negate else field.isin(values)
        if negate:
            raise DataError(f"where: expected 'in' after 'not' in {self.text!r}")
        op = self.take(*_COMPARE, what="a comparison (=, !=, <, <=, >, >=, in, is null)")[1]
        return getattr(field, _COMPARE[op])(pc.scalar(self.literal()))


def parse_where(text: str):
    """A ``pyarrow.compute.Expression`` from SQL-like text (``day >= '2026-12-02' and hour in
    (1, 2)``): comparisons, ``in (…)``, ``is [not] null``, ``and``/``or``/``not``, parentheses;
    'single-quoted' values, "double-quoted" column names; and the column names it reads."""
    p = _Parser(text)
    if not p.toks:
        raise DataError("where: the expression is empty")
    e = p.expr()
    if p.i != len(p.toks):
        raise DataError(f"where: unexpected {p.toks[p.i][1]!r} in {text!r}")
    return e, p.names


def matching(parts: Partitions | None, where, name: str) -> np.ndarray:
    """Which files' partition values satisfy ``where`` (text or a pyarrow Expression)."""
    names = None
    if isinstance(where, str):
        where, names = parse_where(where)
    if parts is None:
        raise DataError(f"{name}: where filters files by their key=value directories, and "
                        f"this input has none (no partition columns)")
    missing = [c for c in names or () if c not in parts.names]
    if missing:
        raise DataError(f"{name}: where reads partition columns only ({', '.join(parts.names)}); "
                        f"{', '.join(map(repr, missing))} is not one")
    t = parts.table()
    t = t.append_column("__file__", pa.array(np.arange(len(parts.values))))
    try:
        kept = t.filter(where).column("__file__").to_numpy()
    except (pa.ArrowException, TypeError) as e:
        types = ", ".join(f"{f.name}: {f.type}" for f in parts.fields)
        raise DataError(f"{name}: where {where} cannot be evaluated on the partition columns "
                        f"({types}): {str(e).splitlines()[0]}") from None
    mask = np.zeros(len(parts.values), dtype=bool)
    mask[kept] = True
    return mask
