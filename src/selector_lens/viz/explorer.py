"""The attention explorer: one head or all, any stored example, any checkpoint, chosen in the page.

In the spirit of CircuitsVis: an offline HTML block (plotly.js, embedded once by
`page.write_html`, draws it) whose data is one JSON block, the patterns as bytes. The z keys
and the query that predicts a1 are outlined and bold on the axes; a click on a head in the grid
opens it alone.
"""

from __future__ import annotations

import base64
import html

import numpy as np

from selector_lens.viz.page import script_json

SCRIPT = """<script>
(function () {
  var d = JSON.parse(document.getElementById('explorer-data').textContent);
  var raw = atob(d.bytes), bytes = new Uint8Array(raw.length);
  for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  var L = d.shape[0], H = d.shape[1], T = d.shape[2], nEx = d.examples.length;
  var gd = document.getElementById('explorer-plot');
  var exSel = document.getElementById('explorer-example');
  var headSel = document.getElementById('explorer-head');
  var slider = document.getElementById('explorer-step');
  var stepLabel = document.getElementById('explorer-step-label');
  function option(sel, value, text) {
    var o = document.createElement('option');
    o.value = value; o.textContent = text; sel.appendChild(o);
  }
  d.examples.forEach(function (e, i) { option(exSel, i, e + ': ' + d.tokens[i].join(' ')); });
  option(headSel, 'all', 'all heads');
  for (var l = 0; l < L; l++) for (var h = 0; h < H; h++) option(headSel, l * H + h, 'L' + l + 'H' + h);
  slider.max = d.steps.length - 1; slider.value = d.steps.length - 1;
  var marked = function (i) { return d.z.indexOf(i) >= 0 || i === d.query; };
  function draw() {
    var s = +slider.value, e = +exSel.value, one = headSel.value !== 'all';
    var step = d.steps[s];
    stepLabel.textContent = 'step ' + step + (d.tau ? ' (' + (step / d.tau).toFixed(2) + ' τ)' : '');
    var names = d.tokens[e].map(function (t, i) { return i + ':' + t; });
    var ticks = names.map(function (n, i) { return marked(i) ? '<b>' + n + '</b>' : n; });
    var idx = names.map(function (n, i) { return i; });
    var heads = [];
    if (one) heads.push(+headSel.value);
    else for (var n = 0; n < L * H; n++) heads.push(n);
    var cols = one ? 1 : H, rows = one ? 1 : L, gap = one ? 0 : 0.05;
    var layout = {annotations: [], shapes: [], margin: {t: 60, l: 90, b: 90, r: 30},
      height: one ? 700 : 240 * L + 160, showlegend: false,
      title: {text: (one ? 'L' + Math.floor(heads[0] / H) + 'H' + (heads[0] % H) : 'Every head') +
        ' at ' + stepLabel.textContent + ', example ' + d.examples[e] + ' (rows: query, columns: key)'}};
    var traces = heads.map(function (head, n) {
      var r = Math.floor(n / cols), c = n % cols, ax = n === 0 ? '' : String(n + 1);
      var off = ((s * nEx + e) * L * H + head) * T * T, z = [], text = [];
      for (var q = 0; q < T; q++) {
        z.push([]); text.push([]);
        for (var k = 0; k < T; k++) {
          z[q].push(bytes[off + q * T + k] / 255);
          text[q].push('query ' + names[q] + ' → key ' + names[k]);
        }
      }
      var bottom = r === rows - 1, left = c === 0, size = one ? 12 : 8;
      layout['xaxis' + ax] = {domain: [c / cols + gap, (c + 1) / cols - gap], anchor: 'y' + ax,
        tickvals: idx, ticktext: ticks, showticklabels: bottom, tickangle: 90,
        tickfont: {size: size}, title: {text: bottom ? 'key' : ''}};
      layout['yaxis' + ax] = {domain: [1 - (r + 1) / rows + gap, 1 - r / rows - gap], anchor: 'x' + ax,
        autorange: 'reversed', tickvals: idx, ticktext: ticks, showticklabels: left,
        tickfont: {size: size}, title: {text: left ? 'query' : ''}};
      var x = 'x' + ax, y = 'y' + ax;
      if (!one) layout.annotations.push({text: 'L' + Math.floor(head / H) + 'H' + (head % H),
        xref: x + ' domain', yref: y + ' domain', x: 0.5, y: 1, yanchor: 'bottom', showarrow: false});
      if (d.z.length) layout.shapes.push({type: 'rect', xref: x, yref: y, line: {color: 'red', width: 2},
        x0: Math.min.apply(null, d.z) - 0.5, x1: Math.max.apply(null, d.z) + 0.5, y0: -0.5, y1: T - 0.5});
      layout.shapes.push({type: 'rect', xref: x, yref: y, line: {color: 'orange', width: 2},
        x0: -0.5, x1: T - 0.5, y0: d.query - 0.5, y1: d.query + 0.5});
      return {type: 'heatmap', z: z, x: idx, y: idx, text: text, xaxis: x, yaxis: y, meta: head,
        zmin: 0, zmax: 1, colorscale: 'Viridis', showscale: n === 0,
        colorbar: {title: {text: 'attention'}},
        hovertemplate: '%{text}: %{z:.3f}<extra>L' + Math.floor(head / H) + 'H' + (head % H) + '</extra>'};
    });
    Plotly.react(gd, traces, layout, {responsive: true});
  }
  [exSel, headSel].forEach(function (el) { el.onchange = draw; });
  slider.oninput = draw;
  draw();
  gd.on('plotly_click', function (ev) {
    if (headSel.value !== 'all') return;
    headSel.value = ev.points[0].data.meta; draw();
  });
})();
</script>"""


def attention_explorer(
    patterns: dict[int, np.ndarray],
    examples: list[int],
    tokens: list[list[str]],
    z_positions: list[int],
    query_pos: int,
    tau: int | None = None,
) -> str:
    """The explorer as an HTML block for `page.write_html`.

    patterns: step -> [example, layer, head, query, key] (`analysis.attention.example_patterns`);
    tokens: each example's token strings. The page keeps the patterns to 1/255.
    """
    steps = sorted(patterns)
    stack = np.stack([patterns[s] for s in steps])  # [step, example, layer, head, query, key]
    data = {
        "steps": steps,
        "examples": [int(e) for e in examples],
        "tokens": tokens,
        "shape": list(stack.shape[2:5]),
        "z": [int(p) for p in z_positions],
        "query": int(query_pos),
        "tau": tau,
        "bytes": base64.b64encode(np.round(stack * 255).astype(np.uint8).tobytes()).decode(),
    }
    count = html.escape(f"{len(examples)} examples x {len(steps)} checkpoints")
    marks = (
        "Outlined and bold: <span style='color:red'>the z keys</span> and "
        "<span style='color:darkorange'>the query that predicts a1</span>. "
        if z_positions
        else ""
    )
    return (
        "<h2>Attention explorer</h2>"
        f"<p>{count} stored; choose here. {marks}"
        "Click a head in the grid to open it alone.</p>"
        "<div class='fig explorer'><div class='controls'>"
        "<label>example <select id='explorer-example'></select></label> "
        "<label>head <select id='explorer-head'></select></label> "
        "<label>checkpoint <input type='range' id='explorer-step' min='0' step='1'></label> "
        "<span id='explorer-step-label'></span></div>"
        "<div id='explorer-plot' class='plotly-graph-div'></div></div>"
        f"<script type='application/json' id='explorer-data'>{script_json(data)}</script>" + SCRIPT
    )
