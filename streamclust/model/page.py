"""The pieces of an HTML page of figures and tables that `streamclust report` and `streamclust
sweep` write: one stylesheet, matplotlib made ready for SVG, a figure as inline SVG, a table."""
from __future__ import annotations

import html
import io

from ..errors import StreamclustError

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;max-width:1100px;
margin:2em auto;padding:0 1.2em}h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;
margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}.sub{color:#666}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:right}th{background:#f4f4f4}td.k,th.k{text-align:left}.figure svg{max-width:100%;
height:auto}.grid{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}
"""



def pyplot():
    """matplotlib.pyplot with the Agg backend and the pages' style (a one-line error without
    matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        raise StreamclustError("the report needs matplotlib: pip install 'streamclust[report]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "svg.fonttype": "none", "svg.hashsalt": "streamclust"})
    return plt


def svg(fig) -> str:
    """The figure as inline SVG (the figure is closed)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def table(rows, head=None, left=1) -> str:
    """An HTML table; the first ``left`` columns aligned left."""
    def cell(tag, v, i):
        cls = ' class="k"' if i < left else ""
        v = f"{v:.4g}" if isinstance(v, float) else v
        return f"<{tag}{cls}>{html.escape(str(v))}</{tag}>"
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(cell("th", h, i) for i, h in enumerate(head)) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(cell("td", v, i) for i, v in enumerate(r)) + "</tr>")
    return "".join(out) + "</table>"
