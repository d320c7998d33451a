"""The whole GRPO step, rljax against TRL's `GRPOTrainer`, on the same job.

    pip install -r requirements-bench.txt   # trl (PyTorch + transformers); bench only
    python bench/trl_grpo.py [--prompts 4] [--groups 8] [--new 512] [--steps 3]
                             [--rounds 1] [--rljax-set k=v ...]

The job, the same in both: SmolLM2-135M-Instruct (the bundled GGUF) in float32 on the CPU,
the main job's rubric prompts (train split, seed 0, 1-2 criteria of `CPU_CRITERIA`, chat
template), `--prompts` prompts × G = `--groups` samples per step, up to `--new` new tokens at
temperature 1 (no top-k / top-p), stop at EOS, reward = the rubric CSR (the same
`rljax.rewards` checkers), GRPO advantages, clipped ratio loss, β = 0 (no reference),
one optimizer update per rollout batch, Adam at lr 1e-6, gradient clipping 1.0.
  rljax  `python -m rljax.train --config configs/grpo.py:cpu` with those settings, plus
         `rollout.compact_every=32`, `train.pack=True` and `model.remat=dots` (the rows of
         512-token answers need it in 24 GB); stage times from its metrics.jsonl: the step is
         `time/rollout_and_reward` + `time/train` (the run's final checkpoint left out).
  trl    `trl.GRPOTrainer` (HF `generate` with the KV cache, `num_iterations=1`,
         `loss_type="grpo"`); per-step time from its step callbacks, generation time from a
         timer around the model's `generate`.
Each arm runs `--steps` steps in a fresh process; step 1 (compilation, first call) is
reported apart, the table holds medians of steps 2..S. `--rounds` alternates the two arms
(rljax, trl, rljax, trl, ...). Useful tokens/s = the step's real completion tokens / the
step's seconds (the median over steps); pooled tokens/s = the real tokens of steps 2..S / their
seconds summed. Writes bench/results/trl_grpo.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import interleave as il  # noqa: E402
from bench.common import report  # noqa: E402
from bench.loop import run_trainer  # noqa: E402


def rljax_args(a) -> list[str]:
  sets = {"data.batch_size": a.prompts * a.groups, "rollout.num_generations": a.groups,
          "rollout.max_new_tokens": a.new, "rollout.temperature": 1.0, "rollout.top_k": 0,
          "rollout.top_p": 1.0, "train.num_minibatches": 1, "train.inner_epochs": 1,
          "optim.lr": 1e-6, "optim.grad_clip": 1.0, "eval.every": 0, "eval.at_start": False,
          "eval.num_prompts": 0, "checkpoint.every": 0, "rollout.compact_every": 32, "train.pack": True,
          "model.remat": "dots"}
  for kv in a.rljax_set:
    k, v = kv.split("=", 1)
    sets[k] = v
  return [f"--config.{k}={v}" for k, v in sets.items()]


def run_rljax(a) -> list[dict]:
  rows = run_trainer(ROOT, "configs/grpo.py:cpu", a.steps, rljax_args(a))
  out = []
  for m in rows:
    # the RL step: rollout + rewards, assembly + update (not the run's final checkpoint)
    out.append({"step_s": m["time/rollout_and_reward"] + m["time/train"],
                "rollout_s": m["time/rollout_and_reward"],
                "train_s": m["time/train"],
                "tokens": m["response/length_mean"] * a.prompts * a.groups,
                "clip": m["response/length_clip_ratio"]})
  return out


def trl_worker(a) -> None:
  """One TRL run; prints one JSON line of per-step records."""
  import torch
  import transformers
  from datasets import Dataset
  from trl import GRPOConfig, GRPOTrainer

  from configs.common import CPU_CRITERIA
  from rljax.data.rubric import make_example
  from rljax.models.bundled import smollm2_path
  from rljax.rewards.reward_fn import csr

  torch.manual_seed(0)
  path = smollm2_path()
  kw = dict(gguf_file=os.path.basename(path))
  tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), **kw)
  gguf = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path),
                                                           dtype=torch.float32, **kw)
  # The GGUF loader marks the model quantized (the Trainer then refuses full fine-tuning),
  # though its weights are dequantized float32: the same weights in a plain model.
  conf = gguf.config
  if hasattr(conf, "quantization_config"):
    del conf.quantization_config
  model = transformers.AutoModelForCausalLM.from_config(conf, dtype=torch.float32)
  model.load_state_dict(gguf.state_dict())
  model.generation_config = gguf.generation_config
  del gguf
  n_prompts = a.prompts * (a.steps + 1)
  examples = [make_example(0, "train", i, min_criteria=1, max_criteria=2, ids=CPU_CRITERIA)
              for i in range(n_prompts)]
  ds = Dataset.from_list([{"prompt": [{"role": "user", "content": e["prompt_plus"]}],
                           "example": json.dumps(e)} for e in examples])

  def reward(completions, example, **_):
    rewards, _ = csr([c[0]["content"] for c in completions], [json.loads(e) for e in example])
    return rewards.tolist()

  timing = {"gen": 0.0}
  inner = model.generate

  def timed_generate(*args, **kwargs):
    t = time.perf_counter()
    out = inner(*args, **kwargs)
    timing["gen"] += time.perf_counter() - t
    return out

  model.generate = timed_generate
  steps = []

  class Timer(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
      timing["t0"], timing["gen"] = time.perf_counter(), 0.0

    def on_step_end(self, args, state, control, **kw):
      steps.append({"step_s": time.perf_counter() - timing["t0"], "rollout_s": timing["gen"]})

    def on_log(self, args, state, control, logs=None, **kw):
      if logs and "completions/mean_length" in logs and steps:
        steps[-1]["tokens"] = logs["completions/mean_length"] * a.prompts * a.groups
        steps[-1]["clip"] = logs.get("completions/clipped_ratio")

  cfg = GRPOConfig(
      output_dir=tempfile.mkdtemp(prefix="bench_trl_"), per_device_train_batch_size=a.prompts
      * a.groups, num_generations=a.groups, max_completion_length=a.new, temperature=1.0,
      top_p=1.0, top_k=0, learning_rate=1e-6, beta=0.0, num_iterations=1, loss_type="grpo",
      epsilon=0.2, epsilon_high=0.27, max_grad_norm=1.0, max_steps=a.steps, logging_steps=1,
      bf16=False, fp16=False, use_cpu=True, report_to=[], save_strategy="no", seed=0,
      lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
      dataloader_num_workers=0, log_completions=False)
  trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=reward, args=cfg,
                        train_dataset=ds, callbacks=[Timer()])
  trainer.train()
  for s in steps:
    s["train_s"] = s["step_s"] - s["rollout_s"]
  print("@@" + json.dumps(steps), flush=True)


def run_trl(a) -> list[dict]:
  cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--prompts", str(a.prompts),
         "--groups", str(a.groups), "--new", str(a.new), "--steps", str(a.steps)]
  out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
  line = [x for x in out.stdout.splitlines() if x.startswith("@@")][-1]
  return json.loads(line[2:])


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--groups", type=int, default=8)
  ap.add_argument("--new", type=int, default=512)
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--rounds", type=int, default=1)
  ap.add_argument("--rljax-set", nargs="*", default=[])
  ap.add_argument("--worker", action="store_true")
  a = ap.parse_args()
  if a.worker:
    return trl_worker(a)
  runs = {"rljax": [], "trl": []}
  loads = []
  for r in range(a.rounds):
    for name, fn in (("rljax", run_rljax), ("trl", run_trl)):
      loads.append((name, il.load()))
      t = time.time()
      runs[name].append(fn(a))
      print(f"round {r + 1}: {name} {a.steps} steps in {time.time() - t:.0f}s", flush=True)
  rows = []
  for name, rs in runs.items():
    later = [s for run in rs for s in run[1:]] or [s for run in rs for s in run]
    med = lambda k: statistics.median(s[k] for s in later if s.get(k) is not None)
    counted = [s for s in later if s.get("tokens")]  # steps that logged their tokens
    rows.append({"impl": name, "step_s": med("step_s"), "rollout_s": med("rollout_s"),
                 "train_s": med("train_s"),
                 "useful tokens/s": statistics.median(s["tokens"] / s["step_s"] for s in counted),
                 "pooled tokens/s": (sum(s["tokens"] for s in counted)
                                     / sum(s["step_s"] for s in counted)),
                 "first_step_s": statistics.median(run[0]["step_s"] for run in rs)})
  new, trl = rows
  rows.append({"impl": "trl / rljax", **{k: trl[k] / new[k] for k in new if k != "impl"}})
  report("trl_grpo", ["impl", "step_s", "rollout_s", "train_s", "useful tokens/s",
                      "pooled tokens/s", "first_step_s"], rows,
         {"prompts": a.prompts, "groups": a.groups, "max_new_tokens": a.new, "steps": a.steps,
          "rounds": a.rounds, "rljax_overrides": rljax_args(a), "loads": loads + [il.load()],
          "per_step": runs,
          "note": "medians over steps 2..S of every round; rljax rollout_s includes the "
                  "rewards, trl rollout_s is HF generate only (its rewards and log-prob "
                  "forwards count in train_s)"})


if __name__ == "__main__":
  main()
