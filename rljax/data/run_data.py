"""The data of a run, by `config.data.dataset`: the training source and held-out examples.

    rubric  the built-in rubric prompts (x+ = request + criteria, x- = request)
    jsonl   your prompts: data.path (train) and data.heldout_path (optional held-out
            eval), one JSON object per line (see rljax/data/prompts.py)
    math    the built-in arithmetic / countdown tasks (reward "math_accuracy")

`eval.path` replaces the held-out examples by an IFEval-format JSONL file, e.g. IFBench's
IFBench_test.jsonl (eval/ifbench_prompt_level_strict = IFBench-P, ..._instruction_level_strict
= IFBench-I); its prompts must fit data.max_prompt_len.

Every example has `prompt_plus` and `prompt_minus`; the reward reads the rest.
"""
from __future__ import annotations

from typing import Any, Callable

DATASETS = ("rubric", "jsonl", "math")


def sources(d, seed: int, data_dir: str) -> tuple[Any, Any, Callable]:
  """(train source, held-out source or None, decode) for the data config `d`."""
  from rljax.data import build_math, build_rubric, data_source, decode_record
  if d.dataset == "rubric":
    b = build_rubric(data_dir, seed=seed, num_train=d.num_train, num_heldout=d.num_heldout,
                     min_criteria=d.min_criteria, max_criteria=d.max_criteria,
                     instruction_ids=tuple(d.instruction_ids) or None)
    return data_source(b, "train"), data_source(b, "heldout"), decode_record
  if d.dataset == "math":
    from rljax.data.prompts import math_example
    b = build_math(data_dir, seed=seed, num_train=d.num_train, num_heldout=d.num_heldout)
    return (data_source(b, "train"), data_source(b, "heldout"),
            lambda r: math_example(decode_record(r)))
  if d.dataset == "jsonl":
    from rljax.data.prompts import build_prompts, decode_example
    if not d.get("path", ""):
      raise ValueError("config.data.path: data.dataset='jsonl' needs the prompts file "
                       "(--config.data.path=my_prompts.jsonl)")
    train = data_source(build_prompts(d.path, data_dir), "train")
    held = None
    if d.get("heldout_path", ""):
      held = data_source(build_prompts(d.heldout_path, data_dir), "train")
    return train, held, decode_example
  raise ValueError(f"config.data.dataset: {d.dataset!r}; valid: {', '.join(DATASETS)}")


def eval_file_examples(path: str, num: int) -> list[dict[str, Any]]:
  """Held-out examples from an IFEval-format JSONL (IFEval, IFBench_test.jsonl, ...):
  the prompt as written is x+ (its criteria are in it); eval needs no x-."""
  from rljax.rewards.jsonl import read_ifeval_jsonl
  records, _ = read_ifeval_jsonl(path)
  return [{**r, "id": r["key"], "prompt_plus": r["prompt"], "prompt_minus": ""}
          for r in records[:num]]
