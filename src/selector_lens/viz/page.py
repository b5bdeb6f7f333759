"""One offline HTML page: plotly.js embedded once, no network request, opens from disk."""

from __future__ import annotations

import html
import json
from pathlib import Path

# Under every figure, buttons that save it as PNG or SVG: plotly draws both in the browser, so
# this works offline (the toolbar's camera saves PNG only). No data of the page enters the script.
EXPORT_SCRIPT = """<script>
document.querySelectorAll('div.fig .plotly-graph-div').forEach(function (gd, i) {
  var bar = document.createElement('div');
  bar.className = 'export';
  ['png', 'svg'].forEach(function (format) {
    var b = document.createElement('button');
    b.textContent = 'save ' + format.toUpperCase();
    b.onclick = function () {
      Plotly.downloadImage(gd, {format: format, filename: 'figure-' + (i + 1)});
    };
    bar.appendChild(b);
  });
  gd.parentNode.insertBefore(bar, gd.nextSibling);
});
</script>"""


def write_html(path, title: str, blocks: list) -> Path:
    """Write `blocks` (HTML strings or plotly Figures) as one offline page."""
    from plotly.offline import get_plotlyjs

    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        else:
            parts.append(
                '<div class="fig">'
                + block.to_html(full_html=False, include_plotlyjs=False)
                + "</div>"
            )
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script>"
        "<style>body{font-family:sans-serif;margin:1.5em;max-width:1300px}"
        "table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}"
        ".note{background:#fff3cd;padding:.6em}.fig{margin:1em 0}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{''.join(parts)}{EXPORT_SCRIPT}</body></html>"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def script_json(obj) -> str:
    """JSON to place inside a `<script>` block: `<`, `>` and `&` as \\u escapes, so no value (a run
    path such as `a</script><script>...`) can close the block; JSON.parse reads it back as it was."""
    text = json.dumps(obj)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
