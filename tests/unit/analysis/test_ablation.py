import dataclasses

import numpy as np
import pytest
import torch

import selector_lens as sl
from selector_lens.analysis.ablation import head_ablation, resample_sources
from selector_lens.model.metrics import evaluate_branches
from selector_lens.task.eval_set import make_eval_set
from tests.helpers import tiny

MCFG = sl.ModelConfig(n_layers=2, n_heads=2, d_model=32, d_head=16, d_mlp=64)


@pytest.fixture(scope="module")
def setup():
    task = sl.SelectorTask(k=3, n_bases=5)
    model = sl.build_model(MCFG, task, seed=4)
    return model, make_eval_set(task.generate())


def full_loss_with(model, es, hook):
    """Oracle: the token loss of a full-sequence forward with a hand-written hook_z edit."""
    S = es.task.source_length
    with torch.no_grad():
        logits = model.run_with_hooks(es.tokens, fwd_hooks=[("blocks.1.attn.hook_z", hook)])
        lp = logits.log_softmax(-1)[:, S - 1 : -1].gather(-1, es.tokens[:, S:, None])
    return -lp.mean().item()


@pytest.mark.parametrize("heads", [[(1, 0)], [(1, 0), (1, 1)], [(0, 0), (0, 1), (1, 0), (1, 1)]])
def test_zero_ablation_equals_zeroing_the_heads_output_weights(setup, heads):
    """Also where whole layers are ablated, whose attention the candidates then skip."""
    model, es = setup
    ablated = sl.evaluate(model, es, intervention=head_ablation(model, es, heads, "zero"))
    cut = sl.build_model(MCFG, es.task, seed=4)
    with torch.no_grad():
        for layer, head in heads:
            cut.blocks[layer].attn.W_O[head].zero_()
    want = sl.evaluate(cut, es)
    for key in ("loss", "candidate_loss", "dz", "first_target_loss"):
        assert ablated[key] == pytest.approx(want[key], abs=1e-5), key


def test_zero_ablating_a_head_with_zero_output_weights_changes_nothing(setup):
    _, es = setup
    model = sl.build_model(MCFG, es.task, seed=4)
    with torch.no_grad():
        model.blocks[0].attn.W_O[1].zero_()
    clean = sl.evaluate(model, es)
    ablated = sl.evaluate(model, es, intervention=head_ablation(model, es, [(0, 1)], "zero"))
    for key in ("loss", "candidate_loss", "dz", "first_target_loss"):
        assert ablated[key] == pytest.approx(clean[key], abs=1e-6), key


def test_mean_and_resample_match_a_hand_written_forward(setup):
    model, es = setup
    _, cache = model.run_with_cache(es.tokens)
    z = cache["blocks.1.attn.hook_z"][:, :, 1]  # [N, seq, d_head]

    def mean_hook(act, hook):
        act[:, :, 1] = z.mean(0)
        return act

    src = resample_sources(len(es.tokens), seed=3)

    def resample_hook(act, hook):
        act[:, :, 1] = z[src]
        return act

    got_mean = sl.evaluate(model, es, intervention=head_ablation(model, es, [(1, 1)], "mean"))
    got_res = sl.evaluate(
        model, es, intervention=head_ablation(model, es, [(1, 1)], "resample", seed=3)
    )
    assert got_mean["loss"] == pytest.approx(full_loss_with(model, es, mean_hook), abs=1e-5)
    assert got_res["loss"] == pytest.approx(full_loss_with(model, es, resample_hook), abs=1e-5)
    assert (src != torch.arange(len(src))).all()


def test_mean_ablation_over_a_constant_input_is_a_no_op(setup):
    model, es = setup

    def one(t):
        return t[:1].repeat(6, *([1] * (t.dim() - 1)))

    const = dataclasses.replace(
        es,
        tokens=one(es.tokens),
        deranged=None,
        candidates=one(es.candidates),
        correct=one(es.correct),
        group_pos=torch.zeros(6, dtype=torch.long),
        groups=es.groups[:1],
    )
    clean = sl.evaluate(model, const)
    ablated = sl.evaluate(
        model, const, intervention=head_ablation(model, const, [(0, 0), (1, 1)], "mean")
    )
    # every forward over the data is unchanged (the candidate loss also scores sequences that
    # are not in the data, whose head outputs differ from the data's mean by design)
    for key in ("loss", "first_target_loss", "token_acc"):
        assert ablated[key] == pytest.approx(clean[key], abs=1e-6), key


@pytest.mark.parametrize(
    "heads,words",
    [
        ([(2, 0)], "layer 2 out of range: the model has layers 0..1"),
        ([(0, 5)], "head 5 out of range: the model has heads 0..1"),
        ([], "no heads"),
    ],
)
def test_bad_heads(setup, heads, words):
    model, es = setup
    with pytest.raises(sl.SelectorLensError, match=words):
        head_ablation(model, es, heads, "zero")
    with pytest.raises(sl.SelectorLensError, match="unknown ablation mode"):
        head_ablation(model, es, [(0, 0)], "shuffle")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return sl.train(tiny(steps=60, early_stop=False), out=tmp_path_factory.mktemp("runs") / "r")


def test_ablate_heads_over_a_run(trained):
    table = sl.ablate_heads(trained, [(0, 1)], mode="zero", steps=[20, 60])
    assert list(table.step) == [20, 60] and set(table.heads) == {"L0H1"}
    stored = trained.metrics.set_index("step")
    for _, row in table.iterrows():
        assert row.clean_candidate_loss == stored.loc[row.step, "candidate_loss"]
        assert row.delta_candidate_loss == pytest.approx(
            row.ablated_candidate_loss - row.clean_candidate_loss
        )
    model = trained.model_at(60)
    es = trained.eval_set()
    direct = sl.evaluate(model, es, intervention=head_ablation(model, es, [(0, 1)], "zero"))
    assert table.ablated_loss.iloc[-1] == pytest.approx(direct["loss"], abs=1e-7)
    keep = sl.ablate_heads(trained, [(0, 1)], mode="zero", steps=[60], keep_only=True)
    everything_else = head_ablation(model, es, [(0, 0), (1, 0), (1, 1)], "zero")
    assert keep.ablated_loss.iloc[0] == pytest.approx(
        sl.evaluate(model, es, intervention=everything_else)["loss"], abs=1e-7
    )


@pytest.mark.parametrize("keep_only", [False, True])
@pytest.mark.parametrize("mode", ["mean", "resample"])
def test_batched_ablation_sweep_equals_one_evaluation_per_head(trained, keep_only, mode):
    """`ablate_each_head` shares the layers below each head's across the heads of its layer;
    its numbers equal one full evaluation per head (necessity and sufficiency)."""
    table = sl.ablate_each_head(trained, [60], mode, keep_only=keep_only, recompute=True)
    model, es = trained.model_at(60), trained.eval_set()
    every = [(0, 0), (0, 1), (1, 0), (1, 1)]
    for _, row in table.iterrows():
        head = (int(row["layer"]), int(row["head"]))
        targets = [x for x in every if x != head] if keep_only else [head]
        one = sl.evaluate(model, es, intervention=head_ablation(model, es, targets, mode))
        for m in ("loss", "first_target_loss", "candidate_loss", "candidate_acc", "dz"):
            assert row[f"ablated_{m}"] == pytest.approx(one[m], abs=1e-5), (head, m)


@pytest.mark.parametrize("mode", ["mean", "resample"])
def test_branches_from_several_layers_equal_one_evaluation_each(setup, mode):
    """One trunk run serves branches starting at different layers: every metric of each,
    attention to z included, equals its own full evaluation."""
    model, es = setup
    sets = [[(0, 0), (0, 1)], [(0, 0), (1, 0)], [(0, 0), (1, 0), (1, 1)]]
    ablations = [head_ablation(model, es, heads, mode, seed=2) for heads in sets]
    trunk = head_ablation(model, es, [(0, 0)], mode, seed=2)  # what all three do below layer 1
    for starts, branches, below in (([0, 1, 1], ablations, trunk), ([1], ablations[1:2], trunk)):
        got = evaluate_branches(model, es, branches, from_layer=starts, trunk=below)
        for g, a in zip(got, branches):
            want = sl.evaluate(model, es, intervention=a)
            for key, value in want.items():
                got_value, value = np.ravel(g[key]), np.ravel(value)  # attn_to_z: [layer][head]
                np.testing.assert_allclose(got_value, value, atol=1e-5, err_msg=key)


def test_branches_must_start_inside_the_model(setup):
    model, es = setup
    with pytest.raises(sl.SelectorLensError, match="from_layer 2 out of range"):
        evaluate_branches(model, es, [None], from_layer=2)


def planted(run, keep: tuple[int, int], out):
    """A copy of `run` whose step-60 checkpoint has every head's W_O zeroed but `keep`'s (its
    metrics row re-evaluated), so no other head can matter."""
    import json
    import shutil

    from selector_lens.model.adapter import save_weights

    shutil.copytree(run.path, out)
    copy = sl.Run.open(out)
    model = copy.model_at(60)
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            for h in range(block.attn.W_O.shape[0]):
                if (layer, h) != keep:
                    block.attn.W_O[h].zero_()
    save_weights(model, copy.ckpt_path(60), 60, copy.config_hash)
    row = sl.evaluate(model, copy.eval_set())
    rows = [{**r, **row} if r["step"] == 60 else r for r in copy.metric_rows()]
    (copy.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return copy


@pytest.mark.parametrize("keep", [(0, 1), (1, 1)])
def test_find_routing_head_on_a_planted_model(trained, tmp_path, keep):
    """The unplanted run's routing head is L0H0; with one head left alive, it is that head, and
    ablating any silent head changes nothing."""
    assert sl.find_routing_head(trained, step=60, sufficiency=False)["label"] == "L0H0"
    found = sl.find_routing_head(planted(trained, keep, tmp_path / "p"), step=60)
    nec = found["necessity"].set_index("heads").delta_candidate_loss
    label = "L{}H{}".format(*keep)
    assert found["label"] == label and found["routing_head"] == keep and nec[label] > 0.01
    assert nec.drop(label).abs().max() < 1e-6
    assert found["best_sufficient_head"] == label  # kept alone, it is the whole model's attention


def test_cascade_onsets_on_a_synthetic_log(tmp_path):
    """Known onsets: attention of L0H1 goes 0.125 -> 0.375 (exactly halfway to its maximum, which
    counts as risen) at step 300 -> 0.625 at 400; Δz passes 0.1 at 600; the candidate loss falls
    below 0.5 log K at 800."""
    import json
    import math

    from selector_lens.runs import rundir

    cfg = tiny()
    rundir.create(tmp_path / "r", cfg.to_dict(), sl.__version__, cfg.task.generate().to_json())
    rows = []
    for step in range(0, 1100, 100):
        a = 0.625 if step >= 400 else 0.375 if step == 300 else 0.125
        rows.append(
            {
                "step": step,
                "attn_to_z": [[0.2, a], [0.3, 0.3]],
                "dz": 0.5 if step >= 600 else 0.01,
                "candidate_loss": 0.1 if step >= 800 else math.log(3),
            }
        )
    (tmp_path / "r" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = sl.cascade(sl.Run.open(tmp_path / "r"), head=(0, 1))
    assert (c["routing_head"], c["attn_onset"], c["dz_onset"], c["tau"]) == ("L0H1", 300, 600, 800)
    assert c["attn_lead_frac"] == pytest.approx(0.625) and c["dz_lead_frac"] == pytest.approx(0.25)
    late = sl.cascade(sl.Run.open(tmp_path / "r"), head=(0, 1), dz_threshold=0.6)
    assert late["dz_onset"] is None and late["dz_lead_frac"] is None


def test_step_selection(trained):
    assert trained.select_steps() == [0, 20, 40, 60]
    assert trained.select_steps(every=2) == [0, 40]
    assert trained.select_steps(step=40) == [40]
    with pytest.raises(
        sl.SelectorLensError, match=r"no checkpoint at step 30 .*nearest: 0, 20, 40"
    ):
        trained.select_steps(step=30)
    series = trained.series([20, 40])
    seen = [(s, id(m)) for s, m in series]
    assert [s for s, _ in seen] == [20, 40] and seen[0][1] == seen[1][
        1
    ]  # one model, loaded in place


def test_phases_need_a_transition(tmp_path):
    run = sl.train(tiny(steps=10, lr=1e-5), out=tmp_path / "r")
    assert run.tau() is None
    with pytest.raises(sl.SelectorLensError, match="never reaches candidate loss < 0.5 log K"):
        run.phases()


def test_direction_without_z(tmp_path):
    run = sl.train(tiny(steps=10, task={"direction": "b_to_a"}), out=tmp_path / "r")
    with pytest.raises(sl.SelectorLensError, match="b_to_a run: it has no z"):
        sl.attention_to_z(run)
    with pytest.raises(sl.SelectorLensError, match="no z to route"):
        sl.find_routing_head(run, step=10)


def test_attention_to_z_from_checkpoints_equals_the_stored_metrics(trained):
    stored = sl.attention_to_z(trained)
    computed = sl.attention_to_z(trained, steps=[20, 60], query="a1")
    merged = computed.merge(stored, on=["step", "layer", "head"], suffixes=("", "_stored"))
    assert len(merged) == 2 * 2 * 2
    assert (merged.attn_to_z - merged.attn_to_z_stored).abs().max() < 1e-6
    target = sl.attention_to_z(trained, steps=[60], query="target")
    assert ((target.entropy >= 0) & (target.entropy <= torch.log(torch.tensor(16.0)).item())).all()
    pats = sl.attention_patterns(trained.model_at(60), trained.task_data.tokens[:3])
    assert pats.shape == (2, 2, 16, 16)
    assert (
        torch.allclose(pats.sum(-1), torch.ones(2, 2, 16), atol=1e-5)
        and pats.triu(1).abs().max() == 0
    )


def test_around_tau_selection(trained):
    assert trained.tau() == 50  # this seed's tiny run crosses 0.5 log K at the step-50 eval
    assert trained.select_steps(around_tau=0.5) == [40, 60]  # checkpoints within [25, 75]
    assert trained.phases() == {
        "pre": 20,
        "mid": 40,
        "post": 60,
        "final": 60,
    }  # nearest to 12.5, 37.5, 75


def test_prune_keeps_the_dense_window(tmp_path):
    run = sl.train(tiny(steps=200, ckpt_every=10, early_stop=False), out=tmp_path / "r")
    t = run.tau()
    before = run.steps
    plan = run.prune(window=(0.5, 1.5), thin_every=3)
    assert plan["dry_run"] and run.steps == before  # a dry run deletes nothing
    window = [s for s in before if 0.5 * t <= s <= 1.5 * t]
    outside = [s for s in before if s not in window]
    assert set(window) <= set(plan["keep"]) and {0, 200} <= set(plan["keep"])
    assert set(plan["keep"]) == {0, 200, *window, *outside[::3]}
    run.prune(window=(0.5, 1.5), thin_every=3, dry_run=False)
    assert run.steps == plan["keep"]
    with pytest.raises(sl.SelectorLensError, match="window must satisfy"):
        run.prune(window=(1.5, 2.0))


def test_prune_needs_a_transition(tmp_path):
    run = sl.train(tiny(steps=10, lr=1e-5), out=tmp_path / "r")
    with pytest.raises(sl.SelectorLensError, match="no transition yet"):
        run.prune()
