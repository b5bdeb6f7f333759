import math

import pytest
import torch

import selector_lens as sl
from selector_lens.task.eval_set import make_eval_set


def naive_metrics(model, es):
    """Oracle: full sequences, one forward per (example, candidate), no caching."""
    task = es.task
    S, N = task.source_length, len(es.tokens)
    with torch.no_grad():
        logp = model(es.tokens).log_softmax(-1)
        tok = logp[:, S - 1 : -1].gather(-1, es.tokens[:, S:, None]).squeeze(-1)  # [N, T+1]
        out = {"loss": -tok.mean().item(), "first_target_loss": -tok[:, 0].mean().item()}
        if task.has_candidates:
            C = es.candidates.shape[1]
            seqs = torch.cat([es.tokens[:, None, :S].expand(N, C, S), es.candidates], -1).reshape(
                N * C, -1
            )
            lp = (
                model(seqs)
                .log_softmax(-1)[:, S - 1 : -1]
                .gather(-1, seqs[:, S:, None])
                .sum((1, 2))
                .reshape(N, C)
            )
            out["candidate_loss"] = -lp.log_softmax(-1)[torch.arange(N), es.correct].mean().item()
            out["candidate_acc"] = (lp.argmax(-1) == es.correct).float().mean().item()
        if es.deranged is not None:
            shuf = model(es.deranged).log_softmax(-1)[:, -1].gather(-1, es.tokens[:, S : S + 1])
            out["dz"] = -shuf.mean().item() - out["first_target_loss"]
            _, cache = model.run_with_cache(es.tokens)
            out["attn_to_z"] = torch.stack(
                [
                    cache["pattern", l][:, :, S - 1, task.z_positions].sum(-1).mean(0)
                    for l in range(model.cfg.n_layers)
                ]
            )
    return out


@pytest.mark.parametrize("direction", ["bz_to_a", "b_to_a", "a_to_b", "az_to_b"])
def test_cached_evaluation_equals_full_forward_oracle(direction):
    task = sl.SelectorTask(k=4, n_bases=6, direction=direction)
    model = sl.build_model(
        sl.ModelConfig(n_layers=2, n_heads=2, d_model=32, d_head=16, d_mlp=64), task, seed=1
    )
    es = make_eval_set(task.generate())
    got = sl.evaluate(model, es, max_rows=10)  # several chunks
    want = naive_metrics(model, es)
    for key in ("loss", "first_target_loss", "candidate_loss", "candidate_acc", "dz"):
        if key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-5), key
        else:
            assert got[key] is None, key
    if "attn_to_z" in want:
        assert torch.allclose(
            torch.tensor(got["attn_to_z"], dtype=torch.float64),
            want["attn_to_z"].double(),
            atol=1e-6,
        )
    else:
        assert got["attn_to_z"] is None
    assert (got["group_correct"] is None) == (not task.has_candidates)


def test_uniform_model_sits_exactly_at_log_k():
    task = sl.SelectorTask(k=6, n_bases=5)
    model = sl.build_model(sl.ModelConfig(n_layers=1), task)
    with torch.no_grad():
        model.unembed.W_U.zero_()
        model.unembed.b_U.zero_()
    m = sl.evaluate(model, make_eval_set(task.generate()))
    assert m["candidate_loss"] == pytest.approx(math.log(6), abs=1e-6)
    assert m["first_target_loss"] == pytest.approx(math.log(40), abs=1e-6)
    assert m["dz"] == pytest.approx(0.0, abs=1e-6)


def test_z_blind_model_has_no_z_gap_and_candidate_loss_of_its_marginal():
    """Mask every key at the z positions: the model ignores z but not B."""
    task = sl.SelectorTask(k=5, n_bases=4)
    model = sl.build_model(sl.ModelConfig(n_layers=2), task, seed=3)
    es = make_eval_set(task.generate())

    def blind(pattern, hook):  # = masking the z keys' scores: renormalise over the others
        pattern = pattern.clone()
        pattern[..., [p for p in task.z_positions if p < pattern.shape[-1]]] = 0.0
        return pattern / pattern.sum(-1, keepdim=True)

    hooks = [(f"blocks.{l}.attn.hook_pattern", blind) for l in range(2)]

    class Blind:  # a metrics.Intervention
        per_example = True

        def hooks(self, examples, offset):
            return list(hooks)

    m = sl.evaluate(model, es, intervention=Blind())
    seqs = torch.cat([es.tokens[:, None, :11].expand(-1, 5, 11), es.candidates], -1).reshape(-1, 16)
    with torch.no_grad():
        logits = model.run_with_hooks(seqs, fwd_hooks=hooks)
        lp = (
            logits.log_softmax(-1)[:, 10:-1]
            .gather(-1, seqs[:, 11:, None])
            .sum((1, 2))
            .reshape(-1, 5)
        )
    p = lp.log_softmax(-1)
    assert torch.allclose(
        p, p[::5].repeat_interleave(5, 0), atol=1e-5
    )  # same distribution for every z
    # the candidate loss of a z-blind model: per group, the cross-entropy of uniform vs its p
    oracle = -p[::5].mean().item()
    assert m["candidate_loss"] == pytest.approx(oracle, abs=1e-5)
    assert m["candidate_loss"] >= math.log(5) - 1e-6
    assert m["dz"] == pytest.approx(0.0, abs=1e-5)
    assert torch.tensor(m["attn_to_z"]).abs().max() < 1e-6


def test_derangement_has_no_fixed_point_and_keeps_the_z_marginal():
    task = sl.SelectorTask(k=4, n_bases=30)
    es = make_eval_set(task.generate(), "all", seed=5)
    clean = es.tokens[:, task.z_positions]
    shuf = es.deranged[:, task.z_positions]
    assert (clean != shuf).any(-1).all()  # no example keeps its own z
    assert torch.equal(es.deranged[:, :8], es.tokens[:, :8])  # B untouched
    for g in range(30):  # within each group the z's are permuted, not resampled
        assert sorted(map(tuple, clean[g * 4 : g * 4 + 4].tolist())) == sorted(
            map(tuple, shuf[g * 4 : g * 4 + 4].tolist())
        )
    assert (
        make_eval_set(sl.SelectorTask(k=1, n_bases=3).generate()).deranged is None
    )  # K=1: undefined


def test_eval_groups_subset_is_whole_seeded_groups():
    data = sl.SelectorTask(k=3, n_bases=300).generate()
    a, b = make_eval_set(data, "auto", seed=1), make_eval_set(data, "auto", seed=1)
    assert len(a.groups) == 100 and torch.equal(a.groups, b.groups)
    assert torch.equal(a.tokens, data.tokens[(a.groups[:, None] * 3 + torch.arange(3)).flatten()])
    assert len(make_eval_set(data, "all").groups) == 300 and len(make_eval_set(data, 7).groups) == 7
    with pytest.raises(sl.SelectorLensError, match="eval_groups"):
        make_eval_set(data, "some")
    again = make_eval_set(
        data, "all", seed=1, groups=a.groups.tolist()
    )  # a run's recorded groups win
    assert torch.equal(again.tokens, a.tokens) and torch.equal(again.deranged, a.deranged)


def test_group_correct_against_full_forward_passes():
    """Oracle: score every candidate of every example by a plain HookedTransformer forward over
    the whole sequence (prefix + candidate), count per group the examples whose best-scored
    candidate is the true one."""
    task = sl.SelectorTask(k=3, n_bases=5)
    model = sl.build_model(sl.ModelConfig(n_layers=1), task, seed=0)
    es = make_eval_set(task.generate())
    m = sl.evaluate(model, es)
    S, want = task.source_length, [0] * 5
    with torch.no_grad():
        for i in range(15):
            seqs = torch.cat([es.tokens[i, :S].expand(3, S), es.candidates[i]], 1)  # [C, S + T + 1]
            logp = model(seqs[:, :-1]).log_softmax(-1)[:, S - 1 :]
            scores = logp.gather(-1, es.candidates[i][..., None]).squeeze(-1).sum(-1)
            want[i // 3] += int(scores.argmax() == es.correct[i])
    assert m["group_correct"] == want and 0 < sum(want) < 15
    assert sum(m["group_correct"]) / 15 == pytest.approx(m["candidate_acc"])


def test_shape_contracts_are_checked_while_testing():
    """pyproject's addopts run the package under jaxtyping + beartype: a tensor of the wrong rank
    or dtype is refused where the signature names its shape."""
    import dataclasses

    from jaxtyping import TypeCheckError

    from selector_lens.model import fused

    es = make_eval_set(sl.SelectorTask(k=2, n_bases=3).generate())
    with pytest.raises(TypeCheckError):
        dataclasses.replace(es, correct=es.correct[:2])  # [n] must match the tokens' n
    model = sl.build_model(sl.ModelConfig(n_layers=1), es.task, seed=0)
    with pytest.raises(TypeCheckError):
        fused.forward(model, es.tokens.float())
    # a module that binds torch lazily (`selector_lens.lazy`) is checked all the same
    from selector_lens.analysis.representations import variance_split

    assert variance_split(torch.ones(2, 3, 4)) == (0.0, 0.0)
    with pytest.raises(TypeCheckError):
        variance_split(torch.ones(2, 3))
