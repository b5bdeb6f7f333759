"""The `reproduce` report page: the claims table (paper, ours, verdict, settings), then each
study's sentence and figures, as one self-contained HTML file."""

from __future__ import annotations

import html

from selector_lens.viz.page import write_html

VERDICT_COLOURS = {
    "reproduced": "#d4edda",
    "partly": "#fff3cd",
    "not reproduced": "#f8d7da",
    "no result": "#e2e3e5",
}


def _cell(x) -> str:
    return f"<td style='text-align:left'>{html.escape(str(x))}</td>"


def claims_table(claims) -> str:
    rows = "".join(
        f"<tr><td>{c.number}</td>{_cell(c.title)}{_cell(c.paper)}{_cell(c.ours)}"
        f"<td style='background:{VERDICT_COLOURS[c.verdict]}'>{c.verdict}</td>{_cell(c.settings)}</tr>"
        for c in claims
    )
    head = "<tr><th>#</th><th>claim</th><th>paper</th><th>ours</th><th>verdict</th><th>settings</th></tr>"
    return f"<table>{head}{rows}</table>"


def write_report(output, summary: dict, claims, studies: list, root) -> None:
    """`summary`: scale, executor, wall_s, study_s (as in report.json); `studies`: in page order,
    each with its claims and figures."""
    times = summary["study_s"]
    intro = (
        f"<p>Scale <b>{summary['scale']}</b>, executor {summary['executor']}: "
        f"{summary['wall_s'] / 60:.1f} min wall time ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
        + f"). Runs under <code>{html.escape(str(root))}</code>; rerunning reuses finished runs. "
        "τ = first eval step with candidate loss < 0.5 log K unless a claim says otherwise. "
        "Verdict rules: <code>selector_lens/paper/verdicts.py</code>.</p>"
    )
    blocks = [intro, claims_table(claims)]
    for s in studies:
        first = s.claims[0]
        blocks.append(
            f"<h2>Claim {first.number}: {html.escape(first.title)}</h2><p>{html.escape(first.ours)}</p>"
        )
        blocks.extend(s.figures)
    write_html(output, f"Marginals Before Conditionals: reproduction ({summary['scale']})", blocks)
