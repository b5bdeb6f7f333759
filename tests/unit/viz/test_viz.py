import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import selector_lens as sl
from selector_lens import viz
from selector_lens.runs.steps import thin
from selector_lens.runs.transition import group_crossing_steps
from selector_lens.viz.dashboard import run_dashboard
from selector_lens.viz.figures import DZ_FLOOR
from tests.helpers import render, tiny


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return sl.train(tiny(steps=60, early_stop=False), out=tmp_path_factory.mktemp("viz") / "r")


def test_thin_keeps_ends_and_bounds():
    assert thin(range(10), 20) == list(range(10))
    kept = thin(range(0, 1000, 10), 7)
    assert kept[0] == 0 and kept[-1] == 990 and len(kept) == 7


def test_line_figures_carry_the_metrics(run):
    m = run.metrics
    fig = viz.loss_curves(m, run.config.task.log_k, run.tau())
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["candidate loss"].y) == list(m.candidate_loss)
    assert list(by_name["first-target loss"].x) == list(m.step)
    dz = viz.dz_curve(m).data[0]
    assert np.allclose(dz.y, np.maximum(m.dz, DZ_FLOOR))


def test_attention_heatmap_equals_the_table(run):
    table = sl.attention_to_z(run)
    fig = viz.attention_heatmap(table, routing_head="L0H1")
    hm = fig.data[0]
    for i, label in enumerate(hm.y):
        layer, head = int(label[1]), int(label[3])
        for j, step in enumerate(hm.x):
            want = table[
                (table.step == step) & (table.layer == layer) & (table["head"] == head)
            ].attn_to_z.item()
            assert hm.z[i][j] == pytest.approx(want)
    assert fig.layout.shapes[0].y0 == list(hm.y).index("L0H1") - 0.5


def test_group_transition_is_the_sorted_group_accuracy(run):
    m = run.metrics
    fig = viz.group_transition(m, k=3)
    z = np.array(fig.data[0].z)  # [groups (sorted), steps]
    acc = np.array(m.group_correct.tolist()) / 3  # [steps, groups]
    assert sorted(map(tuple, z.round(6))) == sorted(
        map(tuple, acc.T.round(6))
    )  # same rows, reordered
    crossing = group_crossing_steps(m.step.tolist(), acc)
    assert list(np.sort(crossing)) == list(group_crossing_steps(m.step.tolist(), z.T))
    assert group_crossing_steps([0, 10, 20], np.array([[0, 0], [1, 0], [1, 0.4]])).tolist() == [
        10,
        np.inf,
    ]


def test_ablation_and_patching_heatmaps_equal_their_tables(run):
    table = sl.ablate_each_head(run, [20, 60], mode="zero")
    fig = viz.ablation_heatmaps(table, {"pre": 20, "post": 60})
    for trace, step in zip(fig.data, (20, 60)):
        for i, layer in enumerate(trace.y):
            for j, head in enumerate(trace.x):
                row = table[
                    (table.step == step)
                    & (table.layer == int(layer[1:]))
                    & (table["head"] == int(head[1:]))
                ]
                assert trace.z[i][j] == pytest.approx(row.delta_candidate_loss.item())
    patch = sl.patch_series(run, "resid_pre", [20, 60], n_examples=12)
    fig = viz.patching_heatmap(patch, ["t"] * 16)
    assert len(fig.data) == 2 and len(fig.layout.sliders[0].steps) == 2
    last = patch[patch.step == 60].pivot_table(index="layer", columns="pos", values="value").values
    assert (
        np.allclose(np.array(fig.data[1].z), last)
        and fig.data[1].visible
        and not fig.data[0].visible
    )
    assert len(set(fig.data[0].x)) == 16  # repeated tokens stay distinct positions


def test_explorer_patterns_are_each_examples_own_to_a_byte(run, tmp_path):
    from selector_lens.analysis.attention import example_patterns, explorer_examples
    from selector_lens.paper.publish import publish_run

    examples = explorer_examples(run.config.task.n_examples, 5, 4)
    assert examples[0] == 5 and len(set(examples)) == 4
    with pytest.raises(sl.SelectorLensError, match="example 99 out of range"):
        explorer_examples(run.config.task.n_examples, 99)
    got, pats = example_patterns(run, [0, 60], examples)
    assert got == examples and sorted(pats) == [0, 60]
    for i, e in enumerate(examples):  # the oracle: the mean pattern of that example alone
        own = sl.attention_patterns(run.model_at(60), run.task_data.tokens[e : e + 1]).numpy()
        assert np.abs(pats[60][i] - own).max() <= 0.5 / 255 + 1e-9
    # a run published when the store kept one example's explorer (v1, floats) still shows it
    from selector_lens.runs.store import per_checkpoint

    per_checkpoint(
        run,
        "attention_explorer",
        "1",
        {"example": 5},
        [0, 60],
        lambda: lambda s, m: [{"pattern": [[[[0.25]]]]}],
    )
    publish_run(run, tmp_path / "pub")
    published = sl.Run.open(tmp_path / "pub")
    got, pats = example_patterns(published, [0, 60], examples[:3])  # not stored as v2
    assert got == [5] and pats[60].shape == (1, 1, 1, 1, 1) and pats[60].item() == 0.25


# --- the dashboard, in a real browser -----------------------------------------------------


def test_dashboard_renders_offline_in_chromium(run, tmp_path):
    from PIL import Image

    path = run_dashboard(run, tmp_path / "d.html", patch_steps=3, explorer_steps=3)
    assert path.stat().st_size < 20e6
    html = path.read_text()
    assert re.search(r"<script[^>]*\bsrc\s*=", html) is None  # nothing loaded from elsewhere
    assert html.count("plotly.js v") == 1  # embedded once, no script loaded from elsewhere
    info = json.loads(html.split("id='run-info'>")[1].split("</script>")[0])
    assert info["tau"] == run.tau() and info["routing_head"] is not None
    errors, requests, figs, rendered, shot = render(path)
    assert errors == []
    assert all(u.startswith("file://") for u in requests), requests  # no network request
    # loss, Δz, attention, cascade, groups, ablation, patching, weights, lens, representations,
    # explorer
    assert figs == 11 and rendered == figs
    colors = Image.open(io.BytesIO(shot)).convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 100  # not blank


def test_a_hostile_run_path_runs_no_script(run, tmp_path):
    """A run path is a value in the page's run-info JSON: it cannot close the script block."""
    hostile = tmp_path / "a</script><script>alert(1)</script>" / "run"
    shutil.copytree(run.path, hostile)
    path = run_dashboard(sl.Run.open(hostile), tmp_path / "h.html", patch_steps=2, explorer_steps=2)
    html = path.read_text()
    assert "<script>alert(1)" not in html
    info = json.loads(html.split("id='run-info'>")[1].split("</script>")[0])
    assert info["run"] == str(hostile)  # read back as it was
    errors, *_ = render(path)
    assert errors == []  # an alert would be recorded as "dialog: 1"


def test_analyze_stores_what_the_dashboard_reads(run, tmp_path, monkeypatch):
    """After `selector-lens analyze`, a dashboard computes nothing from checkpoints: every table
    comes from the store (a checkpoint load would raise here), and draws the same figures."""
    import shutil as sh

    from selector_lens.analysis.tables import gather
    from tests.helpers import cli

    copy = tmp_path / "r"
    sh.copytree(run.path, copy)
    out = cli("analyze", "--run", copy, "--json")
    assert out.returncode == 0, out.stderr
    seconds = json.loads(out.stdout)["seconds"]
    assert {"ablation", "patching", "logit_lens", "explorer", "routing"} <= set(seconds)
    cold = gather(sl.Run.open(copy))

    def no_checkpoints(*a, **k):
        raise AssertionError("a checkpoint was loaded")

    monkeypatch.setattr(sl.Run, "model_at", no_checkpoints)
    warm = gather(sl.Run.open(copy))
    assert warm.routing == cold.routing is not None
    assert warm.ablation.equals(cold.ablation) and warm.lens.equals(cold.lens)
    assert warm.patching.equals(cold.patching)
    assert all((warm.explorer[s] == cold.explorer[s]).all() for s in cold.explorer)
    stored = {p.parent.parent.name for p in (copy / "analyses").glob("*/*/step_*.json")}
    assert {"ablation", "patching", "logit_lens", "attention_explorer"} <= stored


def test_dashboard_of_a_run_still_training_and_of_an_empty_run(run, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(run.path, live)
    info = json.loads((live / "run.json").read_text())
    info["status"] = "running"
    (live / "run.json").write_text(json.dumps(info))
    lines = (live / "metrics.jsonl").read_text().splitlines()[:3]  # killed at step 20
    (live / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for p in (live / "ckpt").glob("step_00006*"):
        p.unlink()
    html = run_dashboard(
        sl.Run.open(live), tmp_path / "live.html", patch_steps=2, explorer_steps=2
    ).read_text()
    assert (
        "still training" in html
        and "no transition (yet)" in html
        and "Left out: head ablation" in html
    )
    (live / "metrics.jsonl").write_text("")
    with pytest.raises(sl.SelectorLensError, match="has no metrics yet"):
        run_dashboard(sl.Run.open(live), tmp_path / "empty.html")


def test_static_loglog_svg_places_points_on_log_axes():
    import xml.etree.ElementTree as ET

    from selector_lens.viz.static import loglog_svg

    svg = loglog_svg(
        [(1000, 100, "a"), (10000, 1000, "b"), (100000, 10000, "c")], "t", "D", "τ", line=(0.1, 1.0)
    )
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.findall(f"{ns}circle")
    assert len(circles) == 3
    xs = [float(c.get("cx")) for c in circles]
    ys = [float(c.get("cy")) for c in circles]
    # equal ratios are equal distances on log axes; larger y is higher (smaller cy)
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.2)
    assert ys[0] > ys[1] > ys[2] and ys[0] - ys[1] == pytest.approx(ys[1] - ys[2], abs=0.2)
    # the line y = 0.1 x passes through all three points
    fit = [e for e in root.findall(f"{ns}line") if e.get("stroke-dasharray")][0]
    x1, y1, x2, y2 = (float(fit.get(k)) for k in ("x1", "y1", "x2", "y2"))
    for x, y in zip(xs, ys):
        assert y1 + (y2 - y1) * (x - x1) / (x2 - x1) == pytest.approx(y, abs=0.5)


def test_static_loglog_svg_draws_reference_points_on_the_same_axes():
    import xml.etree.ElementTree as ET

    from selector_lens.viz.static import loglog_svg

    ours = [(1000, 100, "a"), (100000, 10000, "b")]
    svg = loglog_svg(ours, "t", "D", "τ", reference=("paper <x>", [(1000, 100), (10000, 1000)]))
    root = ET.fromstring(svg)  # the name is escaped: still well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    boxes = [r for r in root.findall(f"{ns}rect") if r.get("fill") == "none"]
    assert len(boxes) == 3  # two points and the key's square
    circle = root.findall(f"{ns}circle")[0]
    # the paper's point at the same (x, y) as ours sits on it (squares are centred on their point)
    assert float(boxes[0].get("x")) + 5 == pytest.approx(float(circle.get("cx")), abs=0.1)
    assert float(boxes[0].get("y")) + 5 == pytest.approx(float(circle.get("cy")), abs=0.1)
    assert "paper &lt;x&gt;" in svg


def test_estimators_figure_draws_each_estimate_by_product():
    from selector_lens.viz import study_figures

    row = {
        "run": "r",
        "phase": "pre",
        "step": 50,
        "shifted_iters": 3,
        "shifted_lambda_min_by_iter": [0.1, 0.05, 0.04],
        "lanczos_lambda_min_by_step": [0.0, -0.3, -0.5, -0.5],
    }
    fig = study_figures.estimators([row])
    shifted, lanczos = fig.data
    assert list(shifted.x) == [1, 2, 3] and list(shifted.y) == [0.1, 0.05, 0.04]
    assert list(lanczos.y) == [0.0, -0.3, -0.5, -0.5] and "stopped at 3" in shifted.name
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_noise_branches_figure_sets_the_same_change_from_step_0_beside_them():
    from selector_lens.viz import study_figures

    def kind(change, scale, remaining, start=None):
        row = {"change": change, "noise_scale": scale, "seeds": 2, "escaped": 2}
        row |= {"remaining": remaining, "remaining_range": [remaining - 5, remaining + 5]}
        return row | {"from_step_0": start}

    rows = [kind("lr x2", 2.0, 300, {"run": "lr2", "tau": 900}), kind("lr x0.5", 0.5, 100)]
    branches, start = study_figures.branch_times(rows, "noise", 500).data
    assert list(branches.x) == ["lr x0.5", "lr x2"] and list(branches.y) == [100, 300]
    assert list(start.x) == ["lr x2"] and list(start.y) == [900] and "step 0" in start.name


def test_asymmetry_figure_draws_censored_thresholds_as_lower_bounds():
    from selector_lens.viz import study_figures

    # K = 20 as measured: timed at fractions 0.5 and 0.3, the forward censored below them
    points = [[0.5, 2.09, None], [0.3, 2.08, None], [0.2, None, 1.6], [0.1, None, 1.45]]
    fig = study_figures.asymmetry_curves({"paper": {"K=20 az_to_b": points}, "ours": {}})
    timed, low = fig.data
    assert list(timed.x) == [0.5, 0.3] and list(timed.y) == [2.09, 2.08]
    assert list(low.x) == [0.2, 0.1] and list(low.y) == [1.6, 1.45]
    assert low.marker.symbol == "triangle-up-open" and "at least" in low.name
    assert low.marker.color == timed.line.color  # one K and reverse, one colour
    assert "reverse's" in fig.layout.yaxis.title.text


def test_noise_figure_draws_the_window_over_seeds_and_censored_lrs_as_bounds():
    import pandas as pd

    from selector_lens.viz import study_figures

    lr = pd.DataFrame({"lr": [3e-4, 1e-3], "tau": [3300, 4400]})
    batch = pd.DataFrame({"batch_size": [64, 512], "tau": [12000, 1075]})
    windows = [
        {"lr": 3e-4, "window": 2950.0, "window_at_least": None},
        {"lr": 5e-4, "window": None, "window_at_least": None},  # no seed gives either: left out
        {"lr": 1e-3, "window": None, "window_at_least": 7700.0},
    ]
    fig = study_figures.noise_taus(lr, batch, windows)
    by_name = {t.name: t for t in fig.data}
    mean = by_name["paper: window 0.95 → 0.05 log K (steps, mean over seeds)"]
    low = by_name["paper's window, censored: at least"]
    assert list(mean.x) == [3e-4] and list(mean.y) == [2950.0]
    assert list(low.x) == [1e-3] and list(low.y) == [7700.0]
    assert low.marker.symbol == "triangle-up-open" and low.marker.color == mean.line.color


def test_every_dashboard_figure_titles_its_axes_and_names_its_lines(run, tmp_path, monkeypatch):
    from selector_lens.viz import dashboard

    drawn = []
    monkeypatch.setattr(
        dashboard, "write_html", lambda out, title, blocks: drawn.extend(blocks) or Path(out)
    )
    dashboard.run_dashboard(run, tmp_path / "d.html", patch_steps=3, explorer_steps=3)
    figs = [b for b in drawn if not isinstance(b, str)]
    assert len(figs) == 10  # and the explorer, an HTML block (its own test)
    for fig in figs:
        layout = fig.layout.to_plotly_json()
        axes = [k for k in layout if k.startswith(("xaxis", "yaxis"))]
        assert axes, fig.layout.title.text
        titled = [a for a in axes if (layout[a].get("title") or {}).get("text")]
        assert titled == axes, (fig.layout.title.text, sorted(set(axes) - set(titled)))
        assert all(d.name for d in fig.data if d.type == "scatter"), fig.layout.title.text


def test_every_figure_saves_as_png_and_svg_offline(run, tmp_path):
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    from tests.helpers import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("chromium not installed")
    page_path = run_dashboard(run, tmp_path / "d.html", patch_steps=2, explorer_steps=2)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        page = browser.new_page(accept_downloads=True)
        page.goto(page_path.resolve().as_uri())
        page.wait_for_function("document.querySelectorAll('div.export').length > 0")
        bars = page.locator("div.export")
        figures = page.locator("div.fig").count()
        assert bars.count() == figures
        with page.expect_download() as saved:
            bars.nth(0).locator("button", has_text="save SVG").click()
        svg = Path(saved.value.path()).read_text()
        assert saved.value.suggested_filename == "figure-1.svg" and "<svg" in svg
        browser.close()


def test_the_attention_explorer_picks_example_head_and_checkpoint_in_the_page(run, tmp_path):
    """Chromium drives the controls; what it draws is the stored pattern of the chosen example,
    head and checkpoint, with the z keys and the a1 query outlined and bold."""
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    from selector_lens.analysis.attention import example_patterns
    from tests.helpers import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("chromium not installed")
    task = run.config.task
    path = run_dashboard(run, tmp_path / "d.html", patch_steps=0, example=3, explorer_steps=2)
    from selector_lens.analysis.attention import explorer_examples

    asked = explorer_examples(task.n_examples, 3)
    examples, pats = example_patterns(run, thin(run.steps, 2), asked)
    assert examples[0] == 3
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(path.resolve().as_uri())
        page.wait_for_function("document.getElementById('explorer-plot').data")
        plot = "document.getElementById('explorer-plot')"
        n_ex = page.locator("#explorer-example option").count()
        assert n_ex == len(examples) and page.locator("#explorer-head option").count() == 1 + 4
        assert page.evaluate(f"{plot}.data.length") == 4  # every head, 2 x 2
        assert page.evaluate(f"{plot}.data.filter(t => t.showscale).length") == 1  # a colorbar
        page.select_option("#explorer-head", label="L1H0")
        page.select_option("#explorer-example", index=2)
        page.fill("#explorer-step", "0")
        page.dispatch_event("#explorer-step", "input")
        z = np.array(page.evaluate(f"{plot}.data[0].z"))
        assert page.evaluate(f"{plot}.data.length") == 1
        assert np.abs(z - pats[0][2, 1, 0]).max() < 1e-6  # example index 2, L1H0, step 0
        assert page.inner_text("#explorer-step-label").startswith("step 0")
        ticks = page.evaluate(f"{plot}.layout.xaxis.ticktext")
        bold = [i for i, t in enumerate(ticks) if t.startswith("<b>")]
        assert bold == sorted({*task.z_positions, task.first_target_pos})
        shapes = page.evaluate(f"{plot}.layout.shapes")
        assert {s["line"]["color"] for s in shapes} == {"red", "orange"}
        assert errors == []
        browser.close()


def test_the_dashboard_shows_the_landscape_the_store_keeps(run, tmp_path, monkeypatch):
    """Never computed by the dashboard (minutes at scale): the stored Lanczos table over the most
    checkpoints (then the largest sample) is drawn as it is; without one, a note names the
    command that adds it."""
    from selector_lens.analysis.landscape import landscape
    from selector_lens.analysis.tables import gather

    copy = sl.Run.open(shutil.copytree(run.path, tmp_path / "r"))
    quick = dict(power_iters=4, lanczos_iters=4, top_k=2, noise_batches=2)
    bare = gather(copy, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    assert bare.landscape is None and any("landscape --run" in n for n in bare.notes)
    small = landscape(copy, [20, 60], sample=8, **quick)
    big = landscape(copy, [20, 40], sample=16, **quick)
    landscape(copy, [60], sample=24, **quick)  # the largest sample, at one checkpoint
    landscape(copy, [60], sample=32, estimator="shifted-power", **quick)  # not ours: not shown
    t = gather(copy, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    assert t.landscape.equals(big) and not t.landscape.equals(small)
    fig = viz.landscape_curves(t.landscape, t.tau)
    assert list(fig.data[0].y) == list(big.lambda_max)
    assert np.allclose(fig.data[1].y, big.lambda_min.abs())
    assert list(fig.data[2].y) == list(big.noise_share_top)


def test_noise_only_and_tau_per_k_figures_draw_means_with_their_ranges():
    from selector_lens.viz import study_figures

    rows = [
        {"noise_scale": 0.0, "remaining": 800, "remaining_range": [700, 900], "escaped": 3,
         "seeds": 3, "drift": 0.15},
        {"noise_scale": 4.0, "remaining": None, "remaining_range": None, "escaped": 0,
         "seeds": 3, "drift": 0.001},
    ]  # fmt: skip
    fig = study_figures.noise_only_times(rows, "k20", 4500)
    wait, drift = fig.data
    assert list(wait.x) == [0.0] and list(wait.y) == [800]  # C = 4 never escaped: no point
    assert list(wait.error_y.array) == [100] and list(wait.error_y.arrayminus) == [100]
    assert list(drift.y) == [0.15, 0.001] and drift.name and wait.name
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    per_k = [{"k": 3, "ratio": 0.85, "ratio_range": [0.8, 0.9], "tau": 383, "seeds": 3,
              "paper_tau": 450}]  # fmt: skip
    (ratio,) = study_figures.tau_per_k(per_k).data
    assert list(ratio.y) == [0.85] and list(ratio.error_y.array) == [pytest.approx(0.05)]
