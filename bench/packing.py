"""Packed vs padded update on a realistic rollout batch: SmolLM2 on the rubric prompts with
long, naturally ending answers.

    python bench/packing.py [--prompts 4] [--groups 8] [--new 512] [--rounds 3]
                            [--minibatches 1] [--tokens-per-row 0] [--balance] [--one-block]

1. Draws one rollout batch with the trainer itself (`configs/cort_grpo.py:cpu` with
   `--prompts` × `--groups` rows, `max_new_tokens=--new`, temperature 1, stop at EOS): the
   main job's CoRT-GRPO batch with its replay rows. Records the response-length distribution
   and the rollout's time (`bench/results/packing_batch.npz`; reused unless --resample).
2. Times the update of that batch (`rljax.update.jit_update`: the fused μ = 1 step, or μ =
   --minibatches mini-batch updates; `model.remat="dots"`) padded and packed (`train.pack`: rows of
   --tokens-per-row tokens, 0 = the batch's padded row length; at μ > 1 each whole
   mini-batch is one plan, the rows sent in their mini-batch order), each in its own worker
   process, alternating call by call (bench/interleave.py, medians of --rounds).
   "Useful tokens/s" = the batch's real (non-padding) tokens of x⁺ + response and x⁻ +
   response rows / the update's time. Both workers check that their loss agrees.
   --balance (μ > 1): a third worker, packed with the groups dealt into mini-batches of about
   the same tokens (`train.balance_tokens`), and the packed slots of the random and the
   balanced mini-batches over 64 update keys (host-side plans, no timing); --plans-only:
   only those plan counts, no update is timed.
   --one-block: the padded worker computes attention in one [T, T] block per layer
   (`model.causal_block=0`, the padded update before causal query blocks); the packed ones
   keep the config's `model.causal_block` (64). (A fourth worker would not fit: each worker
   keeps its peak memory, and 32 padded rows of ~600 tokens take several GB.)
Writes bench/results/packing.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from bench.common import report  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BATCH = os.path.join(RESULTS, "packing_batch.npz")


def config(a):
  from configs.common import base_config
  cfg = base_config("cpu")
  cfg.data.batch_size = a.prompts * a.groups
  cfg.rollout.num_generations = a.groups
  cfg.rollout.max_new_tokens = a.new
  cfg.train.num_minibatches = a.minibatches
  cfg.model.remat = "dots"  # 32 rows of 600+ tokens: the dense step keeps 69 GB of residuals
  cfg.eval.num_prompts, cfg.eval.at_start = 0, False
  cfg.log.tensorboard = cfg.log.plot = False
  return cfg


def make_batch(a) -> dict:
  """One rollout batch drawn by the trainer; its arrays and the rollout's seconds."""
  from rljax.trainer import Trainer
  cfg = config(a)
  trainer = Trainer(cfg, tempfile.mkdtemp(prefix="rljax_bench_packing_"))
  t0 = time.perf_counter()
  roll = trainer.collect(0)
  rollout_s = time.perf_counter() - t0
  arrays = trainer.assemble(roll).arrays()
  arrays["rollout_s"] = np.float64(rollout_s)
  arrays["truncated_B"] = np.asarray(roll.r.truncated_B)
  os.makedirs(RESULTS, exist_ok=True)
  np.savez(BATCH, **arrays)
  return arrays


def load_batch() -> dict:
  with np.load(BATCH) as f:
    return {k: f[k] for k in f.files}


def packed_batch(batch: dict, key, g: int, t_, fused: bool, tokens_per_row: int,
                 balance: bool = False):
  """(the batch with its packing plans, rows per plan, tokens per packed row), as the trainer
  builds them: at μ > 1 with one epoch the rows in their mini-batch order (balanced by tokens
  with `balance`), each mini-batch one plan."""
  from rljax import packing
  from rljax.update import minibatch_order
  rows = batch["mask_BxN"].shape[0]
  presorted = not fused and t_.inner_epochs == 1
  if presorted:
    tokens = packing.row_tokens(batch) if balance else None
    order = minibatch_order(key, rows, g, t_.num_minibatches, row_tokens=tokens,
                            units=t_.num_minibatches * t_.grad_accum)
    batch = {k: v[order] for k, v in batch.items()}
  unit = packing.unit_rows(rows, g, fused, t_.grad_accum, t_.num_minibatches, presorted)
  t, plans = packing.planned(batch, unit, tokens_per_row)
  return {**batch, **plans}, unit, t


def plan_slots(a, batch: dict, keys: int = 64) -> dict:
  """{random, balanced: packed slots of the batch's plans over `keys` update keys}."""
  import jax
  from rljax import packing
  cfg = config(a)
  out = {"random": [], "balanced": []}
  for s in range(keys):
    for kind in out:
      pb, _, _ = packed_batch(batch, jax.random.key(s), a.groups, cfg.train, False,
                              a.tokens_per_row, kind == "balanced")
      out[kind].append(sum(packing.packed_tokens(pb).values()))
  return out


def plans_report(a, b: dict, lengths) -> None:
  """--plans-only: the padded positions and the packed slots of random and token-balanced
  mini-batches over 64 update keys (bench/results/packing_plans.json)."""
  from rljax import packing
  if a.minibatches < 2:
    raise SystemExit("--plans-only deals groups into mini-batches: give --minibatches >= 2")
  batch = {k: v for k, v in b.items() if k not in ("rollout_s", "truncated_B")}
  slots = plan_slots(a, batch)
  padded = sum(packing.padded_tokens(batch).values())
  rows = [{"mini-batches": k, "packed slots (mean)": float(np.mean(v)), "min": int(min(v)),
           "max": int(max(v)), "vs padded": float(np.mean(v)) / padded}
          for k, v in slots.items()]
  rows.insert(0, {"mini-batches": "padded", "packed slots (mean)": float(padded),
                  "min": padded, "max": padded, "vs padded": 1.0})
  report("packing_plans", list(rows[0]), rows,
         {"minibatches": a.minibatches, "keys": 64, "lengths": lengths.tolist(),
          "length_clip_ratio": float(np.mean(b["truncated_B"]))})


def worker(a, kind: str):
  import jax
  from bench.interleave import serve
  from rljax import packing
  from rljax.loop.build import build_model, build_step_parts
  from rljax.train_step import init_state
  from rljax.update import jit_update
  import dataclasses
  cfg = config(a)
  if kind == "padded" and a.one_block:
    cfg.model.causal_block = 0
  model = build_model(cfg, None)
  model_params = model.params
  objective, optimizer, sc = build_step_parts(cfg, model.cfg.vocab_size)
  batch = {k: v for k, v in load_batch().items() if k not in ("rollout_s", "truncated_B")}
  t_ = cfg.train
  key = jax.random.key(0)
  rows, g = batch["mask_BxN"].shape[0], cfg.rollout.num_generations
  presorted = kind != "padded" and not sc.fused_scoring and t_.inner_epochs == 1
  if kind != "padded":  # what the trainer does with train.pack (and train.balance_tokens)
    batch, unit, t = packed_batch(batch, key, g, t_, sc.fused_scoring, a.tokens_per_row,
                                  balance=kind == "balanced")
    sc = dataclasses.replace(sc, tokens_per_row=t, pack_group=unit)
  update = jit_update(model.graphdef, optimizer, sc, epochs=t_.inner_epochs,
                      num_minibatches=t_.num_minibatches, presorted=presorted)
  state = [init_state(jax.tree.map(lambda x: x.copy(), model_params), optimizer, objective)]
  batch = jax.device_put(batch)
  compiled = update.lower(state[0], batch, None, key).compile()
  extra = () if sc.fused_scoring else (key,)
  first = {}

  def run():
    state[0], m = compiled(state[0], batch, None, *extra)
    m = jax.device_get(m)
    first.setdefault("loss", float(m["loss"]))

  def info():
    return {"loss": first.get("loss"), "packed_slots": sum(packing.packed_tokens(batch).values()),
            "padded_positions": sum(packing.padded_tokens(batch).values())}

  serve(run, info)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--groups", type=int, default=8)
  ap.add_argument("--new", type=int, default=512)
  ap.add_argument("--minibatches", type=int, default=1)
  ap.add_argument("--tokens-per-row", type=int, default=0)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--resample", action="store_true", help="draw a new rollout batch")
  ap.add_argument("--plans-only", action="store_true",
                  help="with --balance: the plans' packed slots only, no timed update")
  ap.add_argument("--balance", action="store_true",
                  help="also packed with token-balanced mini-batches (needs --minibatches > 1)")
  ap.add_argument("--one-block", action="store_true",
                  help="the padded worker with one [T, T] attention block (causal_block=0)")
  ap.add_argument("--worker", default="")
  a = ap.parse_args()
  if a.worker:
    return worker(a, a.worker)
  from bench.interleave import Worker, interleaved, load, median
  if a.resample or not os.path.exists(BATCH):
    print("drawing the rollout batch ...", flush=True)
    make_batch(a)
  b = load_batch()
  n = b["mask_BxN"].shape[1]
  lengths = b["attn_mask_BxL"][:, -n:].sum(1)
  real = int(b["attn_mask_BxL"].sum() + b.get("minus_attn_mask_BxM", np.zeros(0)).sum())
  argv = [os.path.abspath(__file__), "--prompts", str(a.prompts), "--groups", str(a.groups),
          "--new", str(a.new), "--minibatches", str(a.minibatches), "--tokens-per-row",
          str(a.tokens_per_row)] + (["--one-block"] if a.one_block else [])
  if a.plans_only:
    return plans_report(a, b, lengths)
  kinds = ("padded", "packed", "balanced") if a.balance else ("padded", "packed")
  if a.balance and a.minibatches < 2:
    raise SystemExit("--balance deals groups into mini-batches: give --minibatches >= 2")
  workers = [Worker(k, argv + ["--worker", k]) for k in kinds]
  load0 = load()
  times = interleaved(workers, a.rounds)
  infos = {w.name: json.loads(w.ask("info")) for w in workers}
  for w in workers:
    w.close()
  med = {k: median(v) for k, v in times.items()}
  rows = []
  for k in kinds:
    i = infos[k]
    rows.append({"update": k, "s": med[k], "useful tokens/s": real / med[k],
                 "speed vs padded": med["padded"] / med[k],
                 "positions": i["padded_positions"] if k == "padded" else i["packed_slots"],
                 "loss": i["loss"]})
  meta = {"rows": int(lengths.size), "max_new_tokens": n,
          "response_len_mean": float(lengths.mean()),
          "response_len_p50_p90_max": [float(np.percentile(lengths, 50)),
                                       float(np.percentile(lengths, 90)), int(lengths.max())],
          "length_clip_ratio": float(np.mean(b["truncated_B"])),
          "real_tokens": real, "rollout_s": float(b["rollout_s"]),
          "load": [load0, load()], "rounds": a.rounds, "minibatches": a.minibatches,
          "padded_causal_block": 0 if a.one_block else config(a).model.causal_block,
          "times": times, "lengths": lengths.tolist()}
  if a.balance:
    slots = plan_slots(a, {k: v for k, v in b.items() if k not in ("rollout_s", "truncated_B")})
    meta["plan_slots_64_keys"] = {k: {"mean": float(np.mean(v)), "min": int(min(v)),
                                      "max": int(max(v))} for k, v in slots.items()}
    meta["argv_balance"] = True
  report("packing", list(rows[0]), rows, meta)
  print({k: v for k, v in meta.items() if k not in ("times", "lengths")})


if __name__ == "__main__":
  main()
