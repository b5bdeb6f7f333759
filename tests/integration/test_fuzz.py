"""Fuzzing the command line and the sweep-spec parser (hypothesis, derandomized so CI is
repeatable): every generated bad value gets one line on stderr and exit code 2, no traceback,
and nothing is written."""

import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import selector_lens as sl
from selector_lens.cli import main
from selector_lens.config import OPTIONS

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# words that no option accepts as a number (ASCII only: int() reads other scripts' digits)
WORDS = st.text(string.ascii_letters + "-+.,:;!@#%^&*=/", min_size=1, max_size=12).filter(
    lambda s: any(c.isalpha() for c in s)
)
NOT_FINITE = st.sampled_from(["nan", "inf", "-inf", "1e999", "NaN", "-Infinity"])
NON_INTEGRAL = (
    st.floats(allow_nan=False, allow_infinity=False)
    .filter(lambda v: not float(v).is_integer())
    .map(repr)
)


def kind(name):
    t = OPTIONS[name].type
    return int if t in (int, int | None) else float if t in (float, float | None) else t


VALUED = [n for n in OPTIONS if kind(n) is not bool]


@st.composite
def bad_option(draw):
    """(option, a value it refuses)."""
    name = draw(st.sampled_from(VALUED))
    k, choices = kind(name), OPTIONS[name].choices
    if k is int:
        value = draw(st.one_of(WORDS, NON_INTEGRAL, NOT_FINITE))
    elif k is float:
        value = draw(st.one_of(WORDS, NOT_FINITE))
    else:
        value = draw(WORDS)
        assume(value not in choices and value.lower() not in ("auto", "all", "none"))
    return name, value


def run_main(capsys, *args):
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def one_line_error(code, err):
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


@SETTINGS
@given(bad=bad_option())
def test_a_bad_train_option_is_one_line_and_writes_nothing(tmp_path, capsys, bad):
    name, value = bad
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "train", f"--{name.replace('_', '-')}", value, "--out", out)
    one_line_error(code, err)
    assert not out.exists()


@SETTINGS
@given(bad=bad_option())
def test_a_bad_grid_value_is_one_line_and_writes_nothing(tmp_path, capsys, bad):
    name, value = bad
    assume("," not in value and "=" not in value)  # --grid's own separators
    out = tmp_path / "sweep"
    code, _, err = run_main(capsys, "sweep", "--grid", f"{name}={value}", "--out", out)
    one_line_error(code, err)
    assert not out.exists()


@SETTINGS
@given(text=st.text(max_size=300))
def test_any_spec_text_is_a_spec_or_one_clear_error(tmp_path, text):
    from selector_lens.training.sweep import SweepSpec

    path = tmp_path / "spec.yaml"
    path.write_text(text)
    try:
        SweepSpec.load(path).points()
    except sl.SelectorLensError as e:
        assert "\n" not in str(e).strip(), str(e)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


SCALARS = st.one_of(
    st.integers(-5, 10**7),
    st.floats(),
    st.text(max_size=6),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 5), max_size=2),
)
KEYS = st.one_of(st.sampled_from([*OPTIONS, "D"]), st.text(max_size=6))


@SETTINGS
@given(
    base=st.dictionaries(KEYS, SCALARS, max_size=4),
    grid=st.dictionaries(KEYS, st.lists(SCALARS, min_size=1, max_size=3), max_size=3),
)
def test_any_spec_of_options_is_valid_points_or_one_clear_error(tmp_path, base, grid):
    import yaml

    from selector_lens.training.sweep import SweepSpec

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": grid}))
    try:
        points = SweepSpec.load(path).points()
    except sl.SelectorLensError as e:
        assert "\n" not in str(e).strip(), str(e)
    else:
        assert all(isinstance(p, dict) for p in points)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
