"""`python -m rljax.plot RUN_DIR [RUN_DIR ...] [--out DIR]`: the CoRT ablation panels
(actor grad norm, length-clip ratio, mean token weight, actor entropy) and the reward
curves, one line per run, to PNG."""
from __future__ import annotations

import io
import os

from rljax import paths as rpaths
from rljax.metrics_log import read_metrics

PANELS = (("actor/grad_norm", "actor grad norm"),
          ("response/length_clip_ratio", "length-clip ratio"),
          ("transform/cort/raw_weight_mean", "mean token weight (before normalization)"),
          ("actor/entropy", "actor entropy"))
REWARDS = (("reward/mean", "reward"), ("reward/csr", "CSR"), ("reward/aon", "AON"),
           ("eval/prompt_level_strict", "held-out IFEval-P (strict)"))


def _panel(ax, runs, key, title):
  drawn = False
  for name, recs in runs:
    pts = [(r["step"], r[key]) for r in recs if key in r]
    if pts:
      ax.plot(*zip(*pts), marker="." if len(pts) < 30 else None, label=name)
      drawn = True
  ax.set_title(title if drawn else f"{title} (not logged)")
  ax.set_xlabel("step")
  ax.grid(alpha=0.3)
  return drawn


def plot_runs(run_dirs, out_dir: str) -> list[str]:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  runs = [(os.path.basename(os.path.normpath(d)), read_metrics(d)) for d in run_dirs]
  rpaths.makedirs(out_dir)  # local or a bucket
  paths = []
  for fname, panels in (("cort_panels.png", PANELS), ("rewards.png", REWARDS)):
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, (key, title) in zip(axes, panels):
      _panel(ax, runs, key, title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, fname)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    rpaths.path(path).write_bytes(buf.getvalue())
    plt.close(fig)
    paths.append(path)
  return paths


def main(argv=None):
  from rljax import cli
  ap = cli.parser("python -m rljax.plot", __doc__)
  ap.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
  ap.add_argument("--out", default=None, help="output directory (default: first run's plots/)")
  a = ap.parse_args(argv)
  cli.set_verbosity(a.verbosity)
  for d in a.runs:
    if not os.path.exists(os.path.join(d, "metrics.jsonl")):
      ap.error(f"{d}: no metrics.jsonl (not a run directory)")
  for p in plot_runs(a.runs, a.out or os.path.join(a.runs[0], "plots")):
    print(p)


if __name__ == "__main__":
  main()
