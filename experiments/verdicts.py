"""The verdict rule applied to the committed training studies (4, 4b, 5, 5b, 5c, 5d, 7): every
paper claim they test, as a paired comparison by seed with its CI, p, minimum detectable
effect (MDE) and verdict (`experiments/stats.py`), plus the seeds a design would need to detect the
paper's effect at the observed spread.

    python -m experiments.verdicts [--out DIR]

Reads `experiments/results/{learning_curves,long_credit,mismatch_training,mismatch_seq,
sc_damaging,async_staleness,smollm2_cort}/results.json`
(the committed runs; nothing is rerun, so --quick changes nothing) and writes
`results/verdicts/`: results.json, table.md, forest.png. Effects are in percentage points.
A claim whose paper states a size is judged against it; a claim of direction only can
reproduce or be contradicted, and a null result on it is "not testable at this power".
"""
from __future__ import annotations

import json
import os

import numpy as np

from experiments import common, stats

STUDY = "verdicts"

# (study, claim text, arm A, arm B, table, metric, claimed effect of B - A in pp, sized, note)
# CoRT paper (Qwen3-4B): IFEval-P is prompt-level strict accuracy (our AON), IFEval-I is
# instruction-level (our instruction accuracy); CSR has no paper number of its own, so it is
# judged against IFEval-I's.
CLAIMS = [
    ("4", "CoRT-GRPO beats GRPO (IFEval-P +1.77)", "GRPO", "CoRT-GRPO", "final", "sampled/aon",
     1.77, True, ""),
    ("4", "CoRT-GRPO beats GRPO (IFEval-I +1.27)", "GRPO", "CoRT-GRPO", "final",
     "sampled/instruction_acc", 1.27, True, ""),
    ("4", "CoRT-GRPO beats GRPO (CSR, against IFEval-I's +1.27)", "GRPO", "CoRT-GRPO", "final",
     "sampled/csr", 1.27, True, ""),
    ("4", "CoRT-GRPO beats GRPO (CSR AUC, against +1.27)", "GRPO", "CoRT-GRPO", "auc",
     "sampled/csr", 1.27, True, "area under the held-out curve"),
    ("4", "CoRT-DAPO beats DAPO (IFEval-P +0.85)", "DAPO", "CoRT-DAPO", "final", "sampled/aon",
     0.85, True, ""),
    ("4", "CoRT-DAPO beats DAPO (IFEval-I +1.30)", "DAPO", "CoRT-DAPO", "final",
     "sampled/instruction_acc", 1.30, True, ""),
    ("4", "CoRT-GSPO ≈ GSPO, a small gain (IFEval-P +0.40)", "GSPO", "CoRT-GSPO", "final",
     "sampled/aon", 0.40, True, ""),
    ("4", "CoRT-GSPO ≈ GSPO, a small gain (CSR AUC)", "GSPO", "CoRT-GSPO", "auc", "sampled/csr",
     0.40, False, ""),
    ("4", "without response normalization held-out scores fall", "CoRT-GRPO", "CoRT w/o norm",
     "final", "sampled/csr", -1.0, False, ""),
    ("4", "without the SmoothStep ramp CoRT does worse", "CoRT-GRPO", "CoRT w/o ramp", "final",
     "sampled/csr", -1.0, False, ""),
    # SC paper: mismatch hurts naive PG; SC removes the drift; SC beats TIS under an int8
    # W/A + int4 KV sampler (train accuracy ≈ 30 % vs ≈ 12 %); SC + TIS beats SC when stale.
    ("5", "mismatch hurts naive PG (W8A8 + int4 KV)", "on-policy PG", "W8A8+KV4 / PG", "final",
     "sampled/csr", -1.0, False, "KL(q‖p) ≈ 0.015 nats/token"),
    ("5", "mismatch hurts naive PG (stale-16)", "on-policy PG", "stale-16 / PG", "final",
     "sampled/csr", -1.0, False, "KL ≈ 0.23"),
    ("5", "mismatch hurts naive PG (stale-64)", "on-policy PG", "stale-64 / PG", "final",
     "sampled/csr", -1.0, False, "KL ≈ 2.4"),
    ("5", "SC trains better than naive PG (W8A8 + int4 KV)", "W8A8+KV4 / PG", "W8A8+KV4 / SC",
     "final", "sampled/csr", 1.0, False, ""),
    ("5", "SC trains better than naive PG (stale-16)", "stale-16 / PG", "stale-16 / SC", "final",
     "sampled/csr", 1.0, False, ""),
    ("5", "SC trains better than naive PG (stale-64)", "stale-64 / PG", "stale-64 / SC", "final",
     "sampled/csr", 1.0, False, ""),
    ("5", "SC beats TIS under W8A8 + int4 KV (train accuracy +18)", "W8A8+KV4 / TIS",
     "W8A8+KV4 / SC", "train_last10", "reward/csr", 18.0, True,
     "the paper's sampler is far more damaging (Qwen3-30B-A3B); here KL ≈ 0.015"),
    ("5", "SC beats TIS under W8A8 + int4 KV (held-out)", "W8A8+KV4 / TIS", "W8A8+KV4 / SC",
     "final", "sampled/csr", 1.0, False, ""),
    ("5", "TIS + SC beats SC with a stale sampler (stale-16)", "stale-16 / SC",
     "stale-16 / TIS+SC", "final", "sampled/csr", 1.0, False, ""),
    ("5", "TIS + SC beats SC with a stale sampler (stale-64)", "stale-64 / SC",
     "stale-64 / TIS+SC", "final", "sampled/csr", 1.0, False, ""),
    ("5", "practical BPO corrects the mismatch (stale-16, vs PG)", "stale-16 / PG",
     "stale-16 / BPO", "final", "sampled/csr", 1.0, False, ""),
    ("5", "practical BPO corrects the mismatch (stale-64, vs PG)", "stale-64 / PG",
     "stale-64 / BPO", "final", "sampled/csr", 1.0, False, ""),
    ("5b", "sequence-level TIS corrects a stale sampler (stale-64, vs PG)", "stale-64 / PG",
     "stale-64 / TIS-seq", "final", "sampled/csr", 1.0, False, ""),
    ("5b", "geometric rejection corrects a stale sampler (stale-64, vs PG)", "stale-64 / PG",
     "stale-64 / RS-geo", "final", "sampled/csr", 1.0, False, ""),
    # studies 4b and 5c: n chosen by a power calculation before the runs (8 and 6 seeds)
    ("4b", "CoRT-GRPO beats GRPO (CSR AUC, against +1.27)", "GRPO", "CoRT-GRPO", "auc",
     "sampled/csr", 1.27, True, "answers of 40–56 tokens"),
    ("4b", "CoRT-GRPO beats GRPO (IFEval-P +1.77)", "GRPO", "CoRT-GRPO", "final",
     "sampled/aon", 1.77, True, ""),
    ("4b", "ground-truth token credit helps (oracle ×2; the design check)", "GRPO", "Oracle x2",
     "auc", "sampled/csr", 1.0, False, "not a paper claim"),
    ("5c", "mismatch hurts naive PG (noise0.3, KL 0.37)", "on-policy PG", "PG", "final",
     "sampled/csr", -1.0, False, ""),
    ("5c", "SC beats TIS under a damaging sampler (train accuracy +18)", "TIS", "SC",
     "train_last10", "reward/csr", 18.0, True, "noise0.3: KL 0.37 at the warm start"),
    ("5c", "SC trains better than naive PG (noise0.3)", "PG", "SC", "final", "sampled/csr",
     1.0, False, ""),
    ("5c", "TIS + SC beats SC (noise0.3)", "SC", "TIS+SC", "final", "sampled/csr", 1.0, False,
     ""),
    # study 5d: the asynchronous loop, every batch k versions behind (6 seeds, chosen before)
    *[c for k in (4, 16) for c in (
        ("5d", f"staleness hurts naive PG (lag {k})", "on-policy PG", f"lag {k} / PG", "final",
         "sampled/csr", -1.0, False, "RolloutPipeline(lag=k), threaded"),
        ("5d", f"SC trains better than naive PG (lag {k})", f"lag {k} / PG", f"lag {k} / SC",
         "final", "sampled/csr", 1.0, False, ""),
        ("5d", f"TIS + SC beats SC (lag {k}; train accuracy)", f"lag {k} / SC",
         f"lag {k} / TIS+SC", "train_last10", "reward/csr", 1.0, False,
         "the paper: a sampler synced every 64 steps"),
        ("5d", f"TIS + SC beats SC (lag {k}; held-out)", f"lag {k} / SC", f"lag {k} / TIS+SC",
         "final", "sampled/csr", 1.0, False, ""),
        ("5d", f"MIS + SC beats SC (lag {k}; train accuracy)", f"lag {k} / SC",
         f"lag {k} / MIS+SC", "train_last10", "reward/csr", 1.0, False, ""),
        ("5d", f"MIS + SC beats SC (lag {k}; held-out)", f"lag {k} / SC", f"lag {k} / MIS+SC",
         "final", "sampled/csr", 1.0, False, ""))],
    # study 7: SmolLM2-135M-Instruct, the real trainer, 128 shared held-out prompts
    ("7", "CoRT-GRPO beats GRPO (IFEval-P +1.77, greedy)", "GRPO", "CoRT-GRPO", "final",
     "prompt_level_strict", 1.77, True, "SmolLM2-135M, 8 steps"),
    ("7", "CoRT-GRPO beats GRPO (IFEval-I +1.27, greedy)", "GRPO", "CoRT-GRPO", "final",
     "instruction_level_strict", 1.27, True, ""),
    ("7", "CoRT-GRPO beats GRPO (IFEval-P +1.77, sampled)", "GRPO", "CoRT-GRPO", "final",
     "sampled/prompt_level_strict", 1.77, True, ""),
    ("7", "CoRT-GRPO beats GRPO (IFEval-I +1.27, sampled)", "GRPO", "CoRT-GRPO", "final",
     "sampled/instruction_level_strict", 1.27, True, ""),
]
SOURCES = {"4": "learning_curves", "5": "mismatch_training", "5b": "mismatch_seq",
           "4b": "long_credit", "5c": "sc_damaging", "5d": "async_staleness",
           "7": "smollm2_cort"}


def _values(res: dict, table: str, arm: str, metric: str):
  entry = res[table][arm][metric]
  return np.asarray(entry["values"], np.float64) * 100, entry.get("seeds")


def analyse(results_root: str = common.RESULTS) -> tuple[list[dict], list[dict]]:
  """(rows, pending): a verdict row per claim, and the claims of a study that has fewer than
  two paired seeds committed yet (a sweep that runs across days)."""
  loaded = {k: json.load(open(p)) for k, v in SOURCES.items()
            if os.path.exists(p := os.path.join(results_root, v, "results.json"))}
  rows, pending = [], []
  for study, text, arm_a, arm_b, table, metric, claim, sized, note in CLAIMS:
    res = loaded.get(study)
    n_seeds = lambda arm: 0 if res is None else len(
        (res.get(table) or {}).get(arm, {}).get(metric, {}).get("values", []))
    if min(n_seeds(arm_a), n_seeds(arm_b)) < 2:  # a sweep still running: not judged yet
      pending.append({"study": study, "claim": text, "source": SOURCES[study],
                      "seeds_committed": min(n_seeds(arm_a), n_seeds(arm_b))})
      continue
    a, seeds_a = _values(res, table, arm_a, metric)
    b, seeds_b = _values(res, table, arm_b, metric)
    if seeds_a is not None and seeds_b is not None and seeds_a != seeds_b:
      raise ValueError(f"{text}: arms ran on other seeds ({seeds_a} vs {seeds_b})")
    cmp = stats.paired(a, b)
    v = stats.verdict(cmp, claim, sized=sized)
    need = stats.seeds_for(cmp["sd"], claim) if sized and np.isfinite(cmp["sd"]) else None
    rows.append({"study": study, "claim": text, "a": arm_a, "b": arm_b,
                 "metric": f"{table}:{metric}", "paired": cmp, "verdict": v,
                 "seeds_needed_for_claim": need, "note": note})
  return rows, pending


def _seeds_text(rows: list[dict]) -> str:
  """'n = 3 in 4, 5, 5b; 8 in 4b; ...': the paired seeds of each study's rows."""
  by_n: dict = {}
  for r in rows:
    studies = by_n.setdefault(r["paired"]["n"], [])
    if r["study"] not in studies:
      studies.append(r["study"])
  return "n = " + "; ".join(f"{n} in {', '.join(st)}" for n, st in by_n.items())


def figure(rows: list[dict], path: str) -> None:
  plt = common.pyplot()
  fig, ax = plt.subplots(figsize=(9, 0.36 * len(rows) + 1.2))
  colors = {stats.REPRODUCES: "tab:green", stats.CONTRADICTS: "tab:red",
            stats.NOT_REPRODUCED: "tab:orange", stats.NOT_TESTABLE: "tab:gray"}
  for i, r in enumerate(rows):
    y = len(rows) - 1 - i
    c, v = r["paired"], r["verdict"]
    lo, hi = c["ci95"]
    ax.plot([lo, hi], [y, y], color=colors[v["verdict"]], lw=2)
    ax.plot(c["diff"], y, "o", color=colors[v["verdict"]])
    if v["claim"] is not None:
      ax.plot(v["claim"], y, "k|", ms=12)
  ax.axvline(0, color="k", lw=0.8)
  ax.set_yticks(range(len(rows)))
  ax.set_yticklabels([f"[{r['study']}] {r['claim']}" for r in reversed(rows)], fontsize=7)
  for name, col in colors.items():
    ax.plot([], [], color=col, lw=2, label=name)
  ax.plot([], [], "k|", ms=10, label="paper's effect (where stated)")
  ax.set_xlabel("B − A (pp): mean and 95 % t-interval over paired seeds")
  ax.set_title(f"Paper claims against the studies\n(paired seeds: {_seeds_text(rows)})",
               fontsize=10)
  ax.legend(fontsize=7, loc="lower right")
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def run(out_dir: str, quick: bool = False, seed: int = 0) -> dict:
  timer = common.Timer()
  rows, pending = analyse()
  figure(rows, os.path.join(out_dir, "forest.png"))
  lines = []
  for r in rows:
    c, v = r["paired"], r["verdict"]
    lines.append([r["study"], r["claim"], f"{r['b']} − {r['a']}", r["metric"],
                  f"{c['diff']:+.2f} [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}]",
                  f"{c['p']:.2g}", f"{v['mde']:.2f}",
                  f"{v['claim']:+.2f}" if v["claim"] is not None else "direction only",
                  "—" if r["seeds_needed_for_claim"] is None else
                  (r["seeds_needed_for_claim"] if r["seeds_needed_for_claim"] <= 1000
                   else "> 1000"), f"**{v['verdict']}**", r["note"]])
  table = (f"Paired by seed ({_seeds_text(rows)}), effects in pp; "
           "95 % t-interval; p: paired t-test; MDE at "
           "80 % power, α = 0.05, from the observed spread; seeds needed: the n at which the "
           "MDE reaches the paper's effect at that spread.\n\n"
           + common.md_table(["study", "claim", "B − A", "metric", "effect [95 % CI]", "p",
                              "MDE", "paper", "seeds needed", "verdict", "note"], lines))
  if pending:
    table += ("\nNot judged yet (fewer than 2 paired seeds committed): "
              + "; ".join(f"[{p['study']}] {p['claim']} ({p['seeds_committed']} in "
                          f"results/{p['source']})" for p in pending) + ".\n")
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(table)
  counts = {k: sum(r["verdict"]["verdict"] == k for r in rows)
            for k in (stats.REPRODUCES, stats.CONTRADICTS, stats.NOT_REPRODUCED,
                      stats.NOT_TESTABLE)}
  res = {"study": STUDY, "config": {"seed": seed, "quick": quick, "alpha": stats.ALPHA,
                                    "power": stats.POWER, "sources": SOURCES},
         "rows": rows, "pending": pending, "counts": counts, "figures": ["forest.png"],
         "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


if __name__ == "__main__":
  common.study_main(STUDY, run, __doc__)
