"""Markdown table of the AOT reports in experiments/results/aot/*.json (python -m rljax.aot
--out ...): model x slice -> fits?, per-chip HBM, FLOPs per RL step, time at peak. "train"
is the program the trainer jits for one rollout batch: the fused step (μ = 1) or the
multi-update program (scoring forward + a scan over μ updates)."""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def row(rep: dict) -> str:
  gib = lambda x: f"{x / 2**30:.1f}" if x is not None else "-"
  m, p = rep["model"], rep["programs"]
  p = {k: p.get(k, {"total": None}) for k in ("train_step", "prefill", "decode")}
  name = f"{m['model_type']} L{m['num_layers']} D{m['hidden_size']}"
  mesh = "x".join(str(v) for v in rep["mesh"].values())
  pl = rep.get("placement")
  if pl:  # rollout.placement=disaggregated: two meshes on disjoint chips
    mesh = (f"trainer {mesh} on {pl['trainer_chips']} chips + sampler "
            f"{'x'.join(str(v) for v in pl['sampler_mesh'].values())} on {pl['sampler_chips']}")
  fits = ("yes" if rep["fits"] else "**no**: XLA compile-time HBM OOM" if rep.get("error")
          else "**no**")
  mu = f"{rep.get('updates_per_step', 1)} / {rep.get('grad_accum', '-')}"
  return (f"| {rep.get('config') or name} | {rep['topology']} ({rep['chips']} x "
          f"{rep['chip']}) | {mesh} | {mu} | {fits} | "
          f"{gib(rep['peak_hbm_per_chip'])} / {gib(rep['hbm_per_chip'])} | "
          f"{gib(p['train_step']['total'])} | {gib(p['prefill']['total'])} | "
          f"{gib(p['decode']['total'])} | {rep['flops']['total']:.3g} | "
          f"{rep['ideal_step_seconds']:.1f} s | {rep['compile_seconds']:.0f} s |")


def main(paths):
  reps = [json.load(open(p)) for p in sorted(paths)]
  print("| config | slice | mesh (data x fsdp x tensor) | μ / grad_accum | fits? | "
        "peak HBM / chip (GiB) | train (GiB) | prefill (GiB) | decode (GiB) | "
        "FLOPs per RL step | time at peak | compile |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|")
  for rep in reps:
    print(row(rep))


if __name__ == "__main__":
  main(sys.argv[1:] or glob.glob(os.path.join(HERE, "results", "aot", "*.json")))
