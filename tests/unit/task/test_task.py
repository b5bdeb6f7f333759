import itertools

import pytest
import torch

import selector_lens as sl
from selector_lens import SelectorLensError, SelectorTask
from selector_lens.task.vocab import BOS, EOS, SEP, decode, encode


def test_layout_of_the_paper_sequence():
    task = SelectorTask(k=4, n_bases=5)
    data = task.generate()
    assert data.tokens.shape == (20, 16) and task.seq_len == 16
    assert task.z_positions == [8, 9] and task.first_target_pos == 10
    row = data.tokens[6].tolist()  # base 1, its target 2, selector 2
    assert row[0] == BOS and row[7] == SEP and row[10] == SEP and row[15] == EOS
    assert row[1:7] == encode(data.bases[1])
    assert row[8:10] == encode(data.zs[2])
    assert row[11:15] == encode(data.targets[1][2])
    assert "".join(decode(row[1:7])) == data.bases[1]
    assert data.loss_mask.nonzero().flatten().tolist() == [10, 11, 12, 13, 14]


def test_invariants_d_shared_z_unique_first_char_global_uniqueness():
    task = SelectorTask(k=7, n_bases=50, seed=3)
    data = task.generate()
    assert len(data.tokens) == task.n_examples == 50 * 7
    assert len(set(data.bases)) == 50 and len(set(data.zs)) == 7
    every_a = list(itertools.chain(*data.targets))
    assert len(set(every_a)) == 50 * 7
    assert all(len({a[0] for a in group}) == 7 for group in data.targets)
    # the i-th example of every base carries z_i: z alone says nothing about A
    z = data.tokens[:, task.z_positions].reshape(50, 7, 2)
    assert torch.equal(z, z[:1].expand_as(z))
    assert torch.equal(data.group, torch.arange(50).repeat_interleave(7))
    assert torch.equal(data.candidates[3, 5, :4], torch.tensor(encode(data.targets[3][5])))


def test_deterministic_per_seed():
    a, b, c = (SelectorTask(k=5, n_bases=30, seed=s).generate() for s in (1, 1, 2))
    assert a.to_json() == b.to_json() and torch.equal(a.tokens, b.tokens)
    assert a.to_json() != c.to_json()


@pytest.mark.parametrize(
    "direction,length,zpos,first",
    [
        ("bz_to_a", 16, [8, 9], 10),
        ("b_to_a", 13, [], 7),
        ("a_to_b", 13, [], 5),
        ("az_to_b", 16, [6, 7], 8),
    ],
)
def test_directions(direction, length, zpos, first):
    task = SelectorTask(k=3, n_bases=4, direction=direction)
    data = task.generate()
    assert (
        data.tokens.shape == (12, length)
        and task.z_positions == zpos
        and task.first_target_pos == first
    )
    src, tgt = (
        (data.targets[2][1], data.bases[2])
        if direction.startswith("a")
        else (data.bases[2], data.targets[2][1])
    )
    row = data.tokens[2 * 3 + 1].tolist()
    assert row[1 : 1 + len(src)] == encode(src)
    assert row[first + 1 : first + 1 + len(tgt)] == encode(tgt)
    assert (task.has_z, task.has_candidates) == (bool(zpos), direction in ("bz_to_a", "b_to_a"))


def test_same_strings_in_every_direction():
    fwd = SelectorTask(k=3, n_bases=6, direction="bz_to_a").generate()
    rev = SelectorTask(k=3, n_bases=6, direction="a_to_b").generate()
    assert fwd.to_json() == rev.to_json()


def test_z_length_and_no_unique_first_char():
    task = SelectorTask(k=40, n_bases=3, z_length=1 + 1, unique_first_char=False)
    data = task.generate()
    assert len(set(itertools.chain(*data.targets))) == 120
    assert SelectorTask(k=3, n_bases=2, z_length=4).seq_len == 18


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"k": 0}, "k must be >= 1"),
        ({"k": 37}, "k=37 > 36"),
        ({"n_bases": 0}, "n_bases must be >= 1"),
        ({"n_bases": 2, "b_length": 1, "k": 2, "unique_first_char": False, "z_length": 1}, None),
        ({"n_bases": 37, "b_length": 1}, "exceeds the 36 strings"),
        ({"n_bases": 50_000, "k": 2}, "globally unique targets"),
        ({"k": 37, "z_length": 1, "unique_first_char": False}, "distinct selectors"),
        ({"direction": "sideways"}, "unknown direction"),
    ],
)
def test_impossible_configs_are_one_clear_error(kw, words):
    if words is None:
        SelectorTask(**kw)  # the boundary itself is allowed
        return
    with pytest.raises(SelectorLensError, match=words):
        SelectorTask(**kw)


def test_selector_super_groups_string_by_string():
    """z_groups = 2: bases 0 and 2 use the first K selectors, base 1 the next K; every example's
    z is its super-group's i-th, and the K = 2 candidates of a base are still its own targets."""
    from selector_lens.task.vocab import decode

    task = sl.SelectorTask(k=2, n_bases=3, z_groups=2, seed=1)
    data = task.generate()
    assert len(data.zs) == 4 and len(set(data.zs)) == 4  # 2 super-groups x K, all distinct
    for g in range(3):
        for i in range(2):
            row = "".join(decode(data.tokens[g * 2 + i].tolist()))
            z = data.zs[(g % 2) * 2 + i]
            assert row == f"[BOS]{data.bases[g]}[SEP]{z}[SEP]{data.targets[g][i]}[EOS]", (g, i)
            assert data.selector(g, i) == z
    assert data.zs[:2] != data.zs[2:]
    again = sl.TaskData.from_strings(task, **data.to_json())  # data.json stays exact
    assert torch.equal(again.tokens, data.tokens)
    one = sl.SelectorTask(k=2, n_bases=3, seed=1).generate()  # the bases are drawn first
    assert one.bases == data.bases and len(one.zs) == 2


@pytest.mark.parametrize(
    "kw,words",
    [
        (
            {"k": 10, "z_groups": 13, "z_length": 1, "n_bases": 20},
            "needs 130 distinct selectors but z_length=1 allows only 36; raise z_length",
        ),
        ({"z_groups": 0}, "z_groups must lie in 1..n_bases"),
        ({"n_bases": 5, "z_groups": 6}, "z_groups must lie in 1..n_bases=5"),
        ({"z_groups": 2, "parity": "paper"}, "leave z_groups at 1"),
    ],
)
def test_bad_super_groups(kw, words):
    with pytest.raises(sl.SelectorLensError, match=words):
        sl.SelectorTask(**kw)


def test_deranged_z_comes_from_the_same_base():
    """The eval set's z-deranged prefix carries another selector of the example's own base (its
    super-group's), never one of another super-group."""
    from selector_lens.task.eval_set import make_eval_set

    task = sl.SelectorTask(k=3, n_bases=4, z_groups=2)
    data = task.generate()
    es = make_eval_set(data)
    zpos = task.z_positions
    for e in range(len(es.tokens)):
        g = e // 3
        own = {tuple(data.tokens[g * 3 + i, zpos].tolist()) for i in range(3)}
        got = tuple(es.deranged[e, zpos].tolist())
        assert got in own and got != tuple(es.tokens[e, zpos].tolist())
