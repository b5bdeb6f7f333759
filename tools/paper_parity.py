"""Is `parity="paper"` exact at this K and seed? Runs the paper's own code beside ours and says
where they part.

    git -C <a checkout of mihirs-0/synass-lens> archive HEAD | tar -x -C /tmp/synass
    OMP_NUM_THREADS=1 python tools/paper_parity.py --code /tmp/synass --k 20 --seed 42 --steps 200

A development helper (the paper's code is not a dependency). It builds the paper's dataset,
model and DataLoader from its own modules (`src/data`, `src/model`, `src/training`, as its
`scripts/train.py` does, at the settings of its main runs: split by base, no probe split, unique
first characters, batch 128, AdamW lr 1e-3, wd 0.01, clip 1.0), trains `--steps` steps with its
own `train()`, and compares, against a run of ours with parity "paper" trained as far:
1. the training examples, string for string and in order;
2. the initial weights (bit for bit);
3. the batches of every step (its DataLoader's, read by wrapping its loader);
4. the weights after `--steps` (our step runs through `fused.forward`, equal to the
   HookedTransformer to ~1e-7 per step, so these agree to rounding, not bit for bit).
Its lr schedule: the code's LambdaLR always warms up and decays by a cosine to 0 at
`max_steps`; the main runs state a constant lr (warm-up 0, no decay), which is what our parity
runs train under (`task/paper.py`). `--schedule code` runs the code's own cosine over
`--max-steps` instead, to show how far the two part.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace as NS

import torch

import selector_lens as sl
from selector_lens.config import from_options
from selector_lens.task.paper import EVAL_EVERY


def paper_config(k: int, seed: int, steps: int, max_steps: int, out: str) -> NS:
    return NS(
        experiment=NS(name="parity", seed=seed),
        data=NS(
            n_unique_b=1000,
            k=k,
            task="bz_to_a",
            b_length=6,
            a_length=4,
            z_length=2,
            vocab_chars="abcdefghijklmnopqrstuvwxyz0123456789",
            probe_fraction=0.0,
            split_by_base=True,
            enforce_unique_a_first_char_per_b=True,
        ),
        tokenizer=NS(pad_token="<PAD>", bos_token="<BOS>", eos_token="<EOS>", sep_token="<SEP>"),
        model=NS(n_layers=4, n_heads=4, d_model=128, d_head=32, d_mlp=512, act_fn="gelu"),
        training=NS(
            batch_size=128,
            learning_rate=1e-3,
            weight_decay=0.01,
            max_steps=max_steps,
            warmup_steps=0,
            checkpoint_every=steps,
            eval_every=EVAL_EVERY,
        ),
        output=NS(base_dir=out),
    )


def run_paper_code(code: Path, k: int, seed: int, steps: int, schedule: str, max_steps: int):
    """The paper's pipeline, as its scripts/train.py runs it: (examples, initial weights, the
    batches of each step, weights after `steps`)."""
    sys.path.insert(0, str(code))
    from src.data import collate_fn, create_datasets_from_config, create_tokenizer_from_config
    from src.model import create_model_from_config
    from src.training import trainer as paper_trainer

    out = tempfile.mkdtemp()
    cfg = paper_config(k, seed, steps, max_steps if schedule == "code" else steps, out)
    torch.manual_seed(seed)
    tokenizer = create_tokenizer_from_config(cfg)
    train_set, _, _ = create_datasets_from_config(cfg, tokenizer)
    loader = torch.utils.data.DataLoader(
        train_set, batch_size=128, shuffle=True, collate_fn=collate_fn, num_workers=0
    )
    model = create_model_from_config(cfg, tokenizer)
    model.to("cpu")
    initial = {n: v.detach().clone() for n, v in model.state_dict().items()}
    if schedule == "constant":  # the main runs' stated schedule: no warm-up, no decay
        paper_trainer.get_lr_scheduler = lambda opt, w, m: torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 1.0
        )
    batches = []

    class Recording:  # the loader, each batch's tokens kept as the loop draws it
        def __iter__(self):
            for batch in loader:
                batches.append(batch["input_ids"].clone())
                yield batch

    model.cfg.device = "cpu"
    paper_trainer.train(model, Recording(), [], cfg, Path(out))
    examples = [(e["b"], e["z"], e["a"]) for e in train_set.examples]
    return examples, initial, batches[:steps], model.state_dict()


def run_ours(k: int, seed: int, steps: int, schedule: str, max_steps: int, out: Path):
    options = {"k": k, "n_bases": 1000, "seed": seed, "parity": "paper", "steps": steps}
    options.update(eval_every=steps, ckpt_every=steps, early_stop=False)
    if schedule == "code":
        options.update(schedule="cosine", cosine_steps=max_steps)
    cfg = from_options(options)
    run = sl.train(cfg, out=out)
    data = run.task_data
    examples = [
        (data.bases[g], data.selector(g, i), data.targets[g][i])
        for g in range(len(data.bases))
        for i in range(cfg.task.k)
    ]
    from selector_lens.model.adapter import rng_after_init
    from selector_lens.task.paper import PaperBatchOrder

    order = PaperBatchOrder(
        cfg.task.n_examples, cfg.batch_size, rng_after_init(cfg.model, cfg.task)
    )
    batches = [data.tokens[order.indices(s)] for s in range(1, steps + 1)]
    return examples, run.model_at(0).state_dict(), batches, run.model_at(steps).state_dict()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", type=Path, required=True, help="a checkout of mihirs-0/synass-lens")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--schedule", choices=("constant", "code"), default="constant")
    p.add_argument("--max-steps", type=int, default=10_000, help="the code's cosine end")
    a = p.parse_args()
    theirs = run_paper_code(a.code, a.k, a.seed, a.steps, a.schedule, a.max_steps)
    with tempfile.TemporaryDirectory() as tmp:
        ours = run_ours(a.k, a.seed, a.steps, a.schedule, a.max_steps, Path(tmp) / "run")
    ex_t, init_t, batch_t, end_t = theirs
    ex_o, init_o, batch_o, end_o = ours
    seq = batch_o[0].shape[1]
    report = {
        "k": a.k,
        "seed": a.seed,
        "steps": a.steps,
        "schedule": a.schedule,
        "examples_equal": ex_t == ex_o,
        "n_examples": len(ex_t),
        "initial_weights_equal": all(torch.equal(init_t[n], init_o[n]) for n in init_o),
        "batches_equal": len(batch_t) == len(batch_o)
        and all(torch.equal(t[:, :seq], o) for t, o in zip(batch_t, batch_o)),
        "first_differing_batch": next(
            (
                i + 1
                for i, (t, o) in enumerate(zip(batch_t, batch_o))
                if not torch.equal(t[:, :seq], o)
            ),
            None,
        ),
        "final_weights_max_abs_diff": max(
            (end_t[n] - end_o[n]).abs().max().item()
            for n in end_o
            if end_o[n].is_floating_point() and not n.endswith(("IGNORE", "mask", "b_K"))
        ),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
