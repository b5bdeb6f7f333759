"""The published stages (analyses/results/stages/) are their runs' stores: summary.json's LLC
curve and attribution-to-exact correlation recompute from the published copies, no checkpoint,
and each run's dashboard draws both stages panels."""

import json
from pathlib import Path

import pytest

import selector_lens as sl
from selector_lens.analysis.attribution import compare
from selector_lens.analysis.tables import stored_stages

STAGES = Path(__file__).resolve().parents[2] / "analyses" / "results" / "stages"
SUMMARY = STAGES / "summary.json"


@pytest.mark.skipif(not SUMMARY.is_file(), reason="not published")
def test_the_published_stages_are_their_runs_stores(tmp_path):
    summary = json.loads(SUMMARY.read_text())
    assert "k10-nb1000-s42" in [one["run"] for one in summary["runs"]]
    for one in summary["runs"]:
        run = sl.Run.open(STAGES.parent / one["path"])
        assert not run.has_weights  # everything below is read from the published store
        table, attribution, notes = stored_stages(run)
        assert not notes and sorted(attribution.step.unique()) == run.steps
        assert list(table.step) == one["steps"] and len(one["steps"]) >= 20
        assert [round(x, 3) for x in table.llc] == one["llc_mean"]
        assert [round(x, 3) for x in table.llc_std] == one["llc_std"]
        compared = [x["step"] for x in one["attribution_vs_exact_per_step"]]
        vs = compare(run, compared, recompute=False)
        assert round(vs["correlation"], 4) == one["attribution_vs_exact_r"]
        page = sl.run_dashboard(run, tmp_path / f"{one['run']}.html").read_text()
        assert "Stages: the LLC beside the loss" in page
        assert "attribution patching: each head" in page
