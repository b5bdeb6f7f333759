"""Static SVG figures for places that show images only (the README): no browser, no plotly."""

from __future__ import annotations

import html
import math


def _ticks(lo: float, hi: float) -> list[float]:
    """1-2-3-5 ticks per decade inside [lo, hi]."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 3, 5):
            v = m * 10**e
            if lo <= v <= hi:
                out.append(v)
    return out


def loglog_svg(
    points: list[tuple[float, float, str]],
    title: str,
    xlabel: str,
    ylabel: str,
    line: tuple[float, float] | None = None,
    width: int = 640,
    height: int = 420,
    reference: tuple[str, list[tuple[float, float]]] | None = None,
) -> str:
    """Points (x, y, label) on log-log axes, and optionally the line y = C x^alpha (C, alpha) and
    another source's points, (name, [(x, y), ...]), as open squares with their name in a key."""
    extra = reference[1] if reference else []
    xs, ys = [p[0] for p in [*points, *extra]], [p[1] for p in [*points, *extra]]
    x0, x1 = min(xs) / 1.3, max(xs) * 1.3
    y0, y1 = min(ys) / 1.5, max(ys) * 1.5
    left, right, top, bottom = 70, 20, 40, 50

    def px(x):
        return left + (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) * (
            width - left - right
        )

    def py(y):
        return (
            height
            - bottom
            - (math.log(y) - math.log(y0)) / (math.log(y1) - math.log(y0)) * (height - top - bottom)
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
    ]
    for v in _ticks(x0, x1):
        parts.append(
            f'<line x1="{px(v):.1f}" y1="{height - bottom}" x2="{px(v):.1f}" y2="{height - bottom + 5}" '
            f'stroke="black"/><text x="{px(v):.1f}" y="{height - bottom + 18}" text-anchor="middle">{v:g}</text>'
        )
    for v in _ticks(y0, y1):
        parts.append(
            f'<line x1="{left - 5}" y1="{py(v):.1f}" x2="{left}" y2="{py(v):.1f}" stroke="black"/>'
            f'<text x="{left - 8}" y="{py(v) + 4:.1f}" text-anchor="end">{v:g}</text>'
        )
    parts.append(
        f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{html.escape(xlabel)}</text>'
    )
    parts.append(
        f'<text x="16" y="{height / 2}" text-anchor="middle" transform="rotate(-90 16 {height / 2})">'
        f"{html.escape(ylabel)}</text>"
    )
    if line is not None:
        c, a = line
        parts.append(
            f'<line x1="{px(x0):.1f}" y1="{py(c * x0**a):.1f}" x2="{px(x1):.1f}" y2="{py(c * x1**a):.1f}" '
            f'stroke="#d62728" stroke-dasharray="6 4"/>'
        )
    for x, y, label in points:
        parts.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="#1f77b4"/>'
            f'<text x="{px(x) + 8:.1f}" y="{py(y) - 6:.1f}">{html.escape(label)}</text>'
        )
    if reference is not None:
        name, pts = reference
        for x, y in pts:
            parts.append(
                f'<rect x="{px(x) - 5:.1f}" y="{py(y) - 5:.1f}" width="10" height="10" '
                f'fill="none" stroke="black"/>'
            )
        parts.append(
            f'<rect x="{left + 12}" y="{top + 6}" width="10" height="10" fill="none" stroke="black"/>'
            f'<text x="{left + 28}" y="{top + 15}">{html.escape(name)}</text>'
            f'<circle cx="{left + 17}" cy="{top + 29}" r="5" fill="#1f77b4"/>'
            f'<text x="{left + 28}" y="{top + 33}">ours</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def lines_svg(
    series: list[tuple[str, list[float], list[float]]],
    title: str,
    xlabel: str,
    ylabel: str,
    mark: tuple[float, str] | None = None,
    width: int = 640,
    height: int = 360,
) -> str:
    """Curves (name, xs, ys) on linear axes with a key, and optionally a vertical line at x with
    its label (a transition step)."""
    xs = [x for _, sx, _ in series for x in sx]
    ys = [y for _, _, sy in series for y in sy]
    x0, x1 = min(xs), max(xs) or 1
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.05
    left, right, top, bottom = 60, 20, 40, 50

    def px(x):
        return left + (x - x0) / ((x1 - x0) or 1) * (width - left - right)

    def py(y):
        return height - bottom - (y - y0) / ((y1 - y0) or 1) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        f'stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" '
        f'stroke="black"/>',
        f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{html.escape(xlabel)}</text>',
        f'<text x="16" y="{height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {height / 2})">{html.escape(ylabel)}</text>',
    ]
    for i in range(6):
        vx, vy = x0 + i * (x1 - x0) / 5, y0 + i * (y1 - y0) / 5
        parts.append(
            f'<text x="{px(vx):.1f}" y="{height - bottom + 18}" text-anchor="middle">{vx:g}</text>'
            f'<text x="{left - 8}" y="{py(vy) + 4:.1f}" text-anchor="end">{vy:.3g}</text>'
        )
    if mark is not None:
        x, label = mark
        parts.append(
            f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{height - bottom}" '
            f'stroke="crimson" stroke-dasharray="4 3"/>'
            f'<text x="{px(x) + 4:.1f}" y="{top + 12}" fill="crimson">{html.escape(label)}</text>'
        )
    for i, (name, sx, sy) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy))
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>'
            f'<line x1="{width - 200}" y1="{top + 14 + 16 * i}" x2="{width - 180}" '
            f'y2="{top + 14 + 16 * i}" stroke="{color}" stroke-width="2"/>'
            f'<text x="{width - 175}" y="{top + 18 + 16 * i}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
