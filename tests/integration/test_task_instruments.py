"""Every instrument on every task: ablation, attention to the positions of interest, patching,
the corruption gap, `analyze` and the dashboard on induction, modular addition and the example
task, each held to a hand-written computation on the HookedTransformer itself."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import selector_lens as sl
from selector_lens.analysis.ablation import ablate_heads
from selector_lens.analysis.attention import attention_to_positions
from selector_lens.analysis.patching import corruption_gap, patch_series
from selector_lens.task.induction import InductionTask
from selector_lens.task.modular import ModularTask
from selector_lens.task.protocol import focus, task_class
from tests.helpers import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_task.py"
MODEL = sl.ModelConfig(n_layers=2, n_heads=2, d_model=16, d_head=8, d_mlp=32)
TRAIN = dict(steps=30, batch_size=32, eval_every=10, ckpt_every=10, early_stop=False, lr=3e-3)


def tasks():
    window = task_class(f"{EXAMPLE}:WindowSum")
    return {
        "induction": (InductionTask(vocab=8, length=12, segment=3, n_sequences=300), True),
        "modular": (ModularTask(p=7, train_frac=0.5), False),
        "windowsum": (window(n_train=300), False),
    }


@pytest.fixture(scope="module", params=["induction", "modular", "windowsum"])
def run(request, tmp_path_factory):
    task, attn_only = tasks()[request.param]
    model = sl.ModelConfig(**{**vars(MODEL), "attn_only": attn_only})
    out = tmp_path_factory.mktemp(request.param) / "run"
    return sl.train(sl.TrainConfig(task=task, model=model, **TRAIN), out=out)


def loss_at_focus(task, es, logits, tokens):
    """The focus loss, written out: cross-entropy of each marked next token."""
    mask = focus(task, es)
    logp = logits[:, :-1].log_softmax(-1)
    picked = -logp.gather(-1, tokens[:, 1:, None])[..., 0]
    return picked[mask].mean().item()


def test_attention_to_positions_is_the_patterns_own_mean(run):
    table = attention_to_positions(run, [run.steps[-1]])
    es, task = run.eval_set(), run.config.task
    model = run.model_at(run.steps[-1])
    _, cache = model.run_with_cache(es.tokens)
    for name, (q, k) in task.position_pairs(es).items():
        for layer in range(2):
            pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # [n, head, q, k]
            for head in range(2):
                want = torch.stack([pattern[i, head, q[i], k[i]] for i in range(len(q))]).mean()
                at = (table.layer == layer) & (table["head"] == head) & (table.position == name)
                got = table[at]
                assert got.attention.item() == pytest.approx(want.item(), abs=1e-5)
    if task.name == "induction":  # the task's own per-head scores, logged while training
        row = run.metric_rows()[-1]
        got = table[table.position == "prev_token"].sort_values(["layer", "head"]).attention
        want = [v for per_layer in row["prev_token_score"] for v in per_layer]
        assert list(got) == pytest.approx(want, abs=1e-5)


def test_zero_ablating_a_head_is_the_hand_written_hook(run):
    step = run.steps[-1]
    table = ablate_heads(run, [(1, 0)], mode="zero", steps=[step])
    model, es, task = run.model_at(step), run.eval_set(), run.config.task

    def zero(z, hook):
        z[:, :, 0] = 0.0
        return z

    if task.name == "modular":  # its headline reads the held-out pairs of every pair
        logits = model.run_with_hooks(es.all_tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero)])
        held = ~es.is_train
        want = torch.nn.functional.cross_entropy(
            logits[held, 2, : task.p], es.all_tokens[held, 3]
        ).item()
        assert table.ablated_test_loss.item() == pytest.approx(want, abs=1e-4)
    else:
        logits = model.run_with_hooks(es.tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero)])
        metric = "repeat_loss" if task.name == "induction" else "loss"
        want = loss_at_focus(task, es, logits, es.tokens)
        assert table[f"ablated_{metric}"].item() == pytest.approx(want, abs=1e-4)


def test_keeping_every_head_ablates_nothing_and_keeping_one_costs(run):
    every = [(layer, head) for layer in range(2) for head in range(2)]
    step = run.steps[-1]
    kept_all = ablate_heads(run, every, keep_only=True, steps=[step])
    kept_one = ablate_heads(run, [(0, 0)], keep_only=True, steps=[step], mode="zero")
    metric = "delta_" + getattr(run.config.task, "headline", "loss")
    assert kept_all[metric].item() == pytest.approx(0.0, abs=1e-6)
    assert kept_one[metric].item() != pytest.approx(0.0, abs=1e-6)


def test_head_patching_matches_transformer_lens_and_the_gap_its_ends(run):
    from transformer_lens import patching

    step = run.steps[-1]
    table = patch_series(run, "z", [step], n_examples=64)
    gap = corruption_gap(run, [step], n_examples=64)
    model, es, task = run.model_at(step), run.eval_set(), run.config.task
    n = min(64, len(es.tokens))  # modular mod 7: 24 training pairs
    pick = np.sort(np.random.default_rng(0).choice(len(es.tokens), n, replace=False))
    clean, corrupt = es.tokens[pick], task.corrupt(es, 0)[pick]
    assert (clean != corrupt).any()
    mask = focus(task, es)[pick]

    def loss(logits):
        logp = logits[:, :-1].log_softmax(-1)
        return -logp.gather(-1, clean[:, 1:, None])[..., 0][mask].mean()

    _, clean_cache = model.run_with_cache(clean)
    a, b = loss(model(clean)).item(), loss(model(corrupt)).item()
    assert gap.clean_loss.item() == pytest.approx(a, abs=1e-5)
    assert gap.gap.item() == pytest.approx(b - a, abs=1e-5)
    want = patching.get_act_patch_attn_head_out_all_pos(
        model, corrupt, clean_cache, lambda logits: (b - loss(logits)) / (b - a)
    )  # [layer, head]
    got = table.pivot_table(index="layer", columns="head", values="value").values
    assert got == pytest.approx(want.numpy(), abs=1e-4)


def test_the_cli_instruments_and_the_dashboard_read_any_task(run, tmp_path):
    ablated = cli("ablate-head", "--run", run.path, "--all-heads", "--json")
    assert ablated.returncode == 0, ablated.stderr
    records = json.loads(ablated.stdout)
    steps = {r["step"] for r in records}
    assert len(records) == 4 * len(steps)  # every head at every phase
    assert all(set(r["delta"]) == set(r["clean"]) for r in records)
    attention = cli("attention", "--run", run.path, "--json")
    assert attention.returncode == 0, attention.stderr
    rows = json.loads(attention.stdout)
    names = set(run.config.task.positions)
    assert {r["position"] for r in rows} == names and len(rows) == 4 * len(names) * 4
    text = cli("patch", "--run", run.path, "--site", "z", "--step", run.steps[-1])
    assert text.returncode == 0 and "share of the focus loss" in text.stdout
    page = tmp_path / "d.html"
    made = cli("dashboard", "--run", run.path, "-o", page, "--explorer-examples", "2")
    assert made.returncode == 0, made.stderr
    html = page.read_text()
    for part in ("Attention at", "The corruption gap", "Head ablation", "Activation patching",
                 "Attention explorer"):  # fmt: skip
        assert part in html
    assert "Left out" not in html


def test_a_task_without_positions_says_so_in_one_line(tmp_path):
    from selector_lens.task.protocol import require

    class Bare:
        name = "bare"

    with pytest.raises(sl.SelectorLensError, match="the bare task names no positions"):
        require(Bare(), "position_pairs")
    with pytest.raises(sl.SelectorLensError, match="no corrupted input"):
        require(Bare(), "corrupt")


def test_the_fast_loss_is_the_plain_models_and_the_lens_ends_at_it(run):
    from selector_lens.analysis.lens import logit_lens
    from selector_lens.training.trainer import target_losses

    step, task, es = run.steps[-1], run.config.task, run.eval_set()
    model = run.model_at(step)
    batch = run.task_data.tokens[:16]
    start = task.loss_start
    logits = model(batch)[:, start:-1]
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, start + 1 :].flatten())
    got = target_losses([model], batch[None], start)
    assert got.item() == pytest.approx(want.item(), abs=1e-5)
    lens = logit_lens(run, [step])
    assert list(lens.layer) == [0, 1, 2]  # the embedding, then each block
    own = loss_at_focus(task, es, model(es.tokens), es.tokens)
    assert lens.loss.iloc[-1] == pytest.approx(own, abs=1e-4)  # the last layer is the model


def test_the_landscape_reads_the_tasks_training_loss(run):
    from selector_lens.analysis.landscape import landscape, subsample, target_loss

    step, task = run.steps[-1], run.config.task
    row = landscape(run, [step], sample=16, lanczos_iters=4, power_iters=4, noise_batches=2)
    tokens = run.task_data.tokens[subsample(task.n_examples, 16, 0)]
    want = target_loss(run.model_at(step), tokens, task.loss_start).item()
    assert row.loss.item() == pytest.approx(want, abs=1e-5)


def test_a_shortformer_model_trains_through_the_plain_forward(tmp_path):
    from selector_lens.model import fused

    task = InductionTask(vocab=8, length=12, segment=3, n_sequences=64)
    model = sl.ModelConfig(**{**vars(MODEL), "attn_only": True,
                              "positional_embedding_type": "shortformer"})  # fmt: skip
    run = sl.train(sl.TrainConfig(task=task, model=model, **{**TRAIN, "steps": 10}), out=tmp_path)
    m = run.model_at(10)
    assert m.cfg.positional_embedding_type == "shortformer" and not fused.supports(m)
    tokens = run.task_data.tokens[:5]
    assert torch.equal(fused.forward(m, tokens), m(tokens))
    assert torch.equal(fused.forward([m, m], torch.stack([tokens, tokens]))[1], m(tokens))
    from selector_lens.model.adapter import config_hash

    standard = sl.ModelConfig(**{**vars(MODEL), "attn_only": True})
    assert config_hash(standard) != config_hash(model)  # a shortformer is another model
