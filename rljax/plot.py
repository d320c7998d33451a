"""`python -m rljax.plot RUN_DIR [RUN_DIR ...] [--out DIR]`: the CoRT ablation panels
(actor grad norm, length-clip ratio, mean token weight, actor entropy), the reward
curves and the mismatch panel (KL(q‖p), χ², perplexity ratio, and the fraction of tokens
or responses each correction truncated / masked / rejected), one line per run, to PNG."""
from __future__ import annotations

import io
import os

from rljax import paths as rpaths
from rljax.metrics_log import read_metrics

PANELS = (("actor/grad_norm", "actor grad norm"),
          ("response/length_clip_ratio", "length-clip ratio"),
          ("transform/cort/raw_weight_mean", "mean token weight (before normalization)"),
          ("actor/entropy", "actor entropy"))
MISMATCH = (("mismatch/kl_q_p", "KL(q‖p) on sampled tokens (k3, nats/token)"),
            ("mismatch/chi2", "χ²(p‖q) = E_q[(p/q)²] − 1"),
            ("mismatch/ppl_ratio", "perplexity ratio ppl_p / ppl_q"))
TREATED = ("frac_truncated", "frac_masked", "frac_seqs_rejected", "frac_tokens_rejected")
REWARDS = (("reward/mean", "reward"), ("reward/csr", "CSR"), ("reward/aon", "AON"),
           ("eval/reward_mean", "held-out reward (CSR with reward csr)"),
           ("eval/prompt_level_strict", "held-out IFEval-P (strict)"))


def _treated_panel(ax, runs):
  """Every correction's treated fraction (tis: truncated, mis / bpo: masked, rej*: rejected)."""
  drawn = False
  for name, recs in runs:
    keys = sorted({k for r in recs for k in r if k.startswith("transform/")
                   and k.rsplit("/", 1)[-1] in TREATED})
    for key in keys:
      pts = [(r["step"], r[key]) for r in recs if key in r]
      label = key.split("/", 1)[1] if len(runs) == 1 else f"{name}: {key.split('/', 1)[1]}"
      ax.plot(*zip(*pts), marker="." if len(pts) < 30 else None, label=label)
      drawn = True
  ax.set_title("treated by the correction (fraction)" if drawn
               else "treated by the correction (no correction logged)")
  ax.set_xlabel("step")
  ax.grid(alpha=0.3)
  if drawn:
    ax.legend(fontsize=7)


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
  for fname, panels in (("cort_panels.png", PANELS), ("rewards.png", REWARDS),
                        ("mismatch.png", MISMATCH + (None,))):
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, panel in zip(axes, panels):
      if panel is None:
        _treated_panel(ax, runs)
      else:
        _panel(ax, runs, *panel)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, fname)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    rpaths.path(path).write_bytes(buf.getvalue())
    plt.close(fig)
    paths.append(path)
  name, recs = runs[0]
  if any("timeline/update_start" in r for r in recs):
    paths.append(plot_timeline(recs, os.path.join(out_dir, "timeline.png"), title=name))
  return paths


def plot_timeline(recs, path: str, title: str = "") -> str:
  """The stages of each step on the wall clock: the sampler drawing each batch (the step that
  trains on it is its label) and the learner's update, from the trainer's `timeline/*`
  metrics. Bars of the two lanes that overlap in time ran at once."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(9, 2.4))
  for r in recs:
    if "timeline/collect_start" in r:
      a, b = r["timeline/collect_start"], r["timeline/collect_end"]
      ax.barh(1, b - a, left=a, color="tab:orange", edgecolor="k", linewidth=0.4)
      ax.text(a, 1.3, str(r["step"]), fontsize=6)
    if "timeline/update_start" in r:
      a, b = r["timeline/update_start"], r["timeline/update_end"]
      ax.barh(0, b - a, left=a, color="tab:blue", edgecolor="k", linewidth=0.4)
      ax.text(a, 0.3, str(r["step"]), fontsize=6)
  ax.set_yticks([0, 1], ["learner (update)", "sampler (collect)"])
  ax.set_xlabel("seconds since the run started (the bar's label: the step it feeds)")
  ax.set_title(f"stage timeline {title}".strip(), fontsize=9)
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=110)
  rpaths.path(path).write_bytes(buf.getvalue())
  plt.close(fig)
  return path


def token_heatmap(rows, path: str, *, vmin: float = 0.75, vmax: float = 1.25,
                  label: str = "w̃ (dimensionless)", width: int = 110) -> str:
  """Responses drawn token by token on a background coloured by a per-token value.

  rows: [{"title": str, "tokens": [str], "values": [float], "boxed": [bool] (optional)}];
  a boxed token gets a black frame (e.g. a criterion-bearing token). Writes a PNG (local
  path or bucket) and returns its path."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib import cm, colors
  norm = colors.Normalize(vmin, vmax)
  cmap = matplotlib.colormaps["coolwarm"]
  lines = []  # a title (str) or a list of (token text, value, boxed)
  for row in rows:
    lines.append(row["title"])
    cur, length = [], 0
    boxed = row.get("boxed")
    boxed = [False] * len(row["tokens"]) if boxed is None else boxed
    for t, v, b in zip(row["tokens"], row["values"], boxed):
      t = t.replace("\n", "⏎ ")
      if length + len(t) > width and cur:
        lines.append(cur)
        cur, length = [], 0
      cur.append((t, float(v), bool(b)))
      length += len(t)
    if cur:
      lines.append(cur)
  fs = 7  # monospace: one character is 0.6 fs points wide, so x is in characters
  h = 0.2 * len(lines) + 1.0
  fig = plt.figure(figsize=(width * 0.64 * fs / 72 / 0.96, h))
  ax = fig.add_axes([0.02, 0.8 / h, 0.96, 1 - 0.9 / h])
  ax.set_xlim(0, width)
  ax.set_ylim(len(lines), 0)
  ax.axis("off")
  for y, line in enumerate(lines):
    if isinstance(line, str):
      ax.text(0, y + 0.7, line, fontsize=fs, weight="bold", family="monospace")
      continue
    x = 0.0
    for t, v, b in line:
      ax.text(x, y + 0.7, t, fontsize=fs, family="monospace",
              bbox=dict(boxstyle="square,pad=0.05", fc=cmap(norm(v)),
                        ec="black" if b else "none", lw=0.8))
      x += len(t)
  cax = fig.add_axes([0.3, 0.45 / h, 0.4, 0.12 / h])
  cb = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), cax=cax, orientation="horizontal")
  cb.set_label(label, fontsize=7)
  buf = io.BytesIO()
  fig.savefig(buf, format="png")
  plt.close(fig)
  rpaths.makedirs(os.path.dirname(path) or ".")
  rpaths.path(path).write_bytes(buf.getvalue())
  return path


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
