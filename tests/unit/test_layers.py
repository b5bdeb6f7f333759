"""The package's wings stack: every import in `src/selector_lens` (module-level or inside a
function) goes to the same wing or one below it, and no chain of imports comes back to where it
started. Imports under `if TYPE_CHECKING:` only name types and are left out."""

import ast
from pathlib import Path

import selector_lens as sl

SRC = Path(sl.__file__).parent
# lowest first; a module may import its own wing and the ones before it
WINGS = [
    "errors",
    "files",
    "lazy",
    "fields",
    "task",
    "config",
    "model",
    "runs",
    "analysis",
    "training",
    "viz",
]
WINGS += ["paper", "cli", "__main__"]


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(path: Path) -> set[str]:
    """The selector_lens modules `path` imports, anywhere in it but under TYPE_CHECKING."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and is_type_checking(node):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for a in node.names:  # `from pkg import module` imports the module
                sub = f"{base}.{a.name}"
                found.add(
                    sub
                    if (SRC.parent / sub.replace(".", "/")).exists()
                    or (SRC.parent / (sub.replace(".", "/") + ".py")).exists()
                    else base
                )
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m.split(".")[0] == "selector_lens" and m != mod}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in sorted(SRC.rglob("*.py"))}


def wing(mod: str) -> int | None:
    """The module's wing (its index in WINGS); None for the package root, which only re-exports."""
    parts = mod.split(".")
    return WINGS.index(parts[1]) if len(parts) > 1 else None


def test_every_module_sits_in_a_wing():
    for mod in graph():
        assert mod == "selector_lens" or mod.split(".")[1] in WINGS, mod


def upward(g: dict[str, set[str]]) -> list[str]:
    """The imports from a wing into a higher one (the root, which only re-exports, aside)."""
    return sorted(
        f"{mod} -> {dep}"
        for mod, deps in g.items()
        for dep in deps
        if wing(mod) is not None and wing(dep) is not None and wing(dep) > wing(mod)
    )


def test_imports_only_go_down():
    assert not upward(graph()), "imports into a higher wing:\n" + "\n".join(upward(graph()))


def test_an_upward_import_is_found():
    g = {"selector_lens.task.x": {"selector_lens.model.y", "selector_lens.errors"}}
    assert upward(g) == ["selector_lens.task.x -> selector_lens.model.y"]
    assert upward({"selector_lens.cli.c": {"selector_lens.task.x", "selector_lens"}}) == []


def test_root_is_imported_for_its_version_only():
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "selector_lens":
                assert {a.name for a in node.names} == {"__version__"}, path


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first search (one per back edge)."""
    found, state, stack = [], {}, []

    def dfs(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == "open":
                found.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                dfs(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            dfs(m)
    return found


def test_no_import_cycles():
    g = graph()
    for deps in g.values():
        deps.discard("selector_lens")
    assert not cycles(g), "\n".join(" -> ".join(c) for c in cycles(g))


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_public_names_stay():
    names = """SelectorTask TaskData ModelConfig TrainConfig SelectorLensError build_model train Run
    evaluate make_eval_set tau CheckpointSeries attention_to_z attention_patterns ablate_heads
    ablate_each_head head_ablation patch patch_series z_corruption logit_diff
    normalized_logit_diff find_routing_head cascade logit_lens weight_trajectory
    representation_stats analyze run_dashboard training_set_ablation branch branches
    attention_to_positions corruption_gap attribute attribution_patch""".split()
    assert sorted(sl.__all__) == sorted(["__version__", *names])
    for name in names:
        assert callable(getattr(sl, name)), name
