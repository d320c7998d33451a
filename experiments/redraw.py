"""Redraws the figures of studies 4, 5 and 5b from their committed `results.json`, with the
bands every figure uses: ± one std over seeds, ddof = 1 (`toy_grid.seed_std`). Nothing is
rerun.

    python -m experiments.redraw [--root experiments/results]

The training curves (`fig3_*.png`, `curves_*.png`) come from the stored per-seed curves and
`heldout_final.png` from the stored final evaluation of every seed. The held-out curves over
training (`heldout_curves.png`) need every evaluation of every seed, which a study's run
stores (`evals`) and draws with ddof = 1; where a `results.json` lacks them, its
`heldout_curves.png` predates the convention and is removed, not kept beside the others.
"""
from __future__ import annotations

import argparse
import json
import os

from experiments import common, learning_curves, mismatch_seq, mismatch_training, toy_grid

STUDIES = (learning_curves, mismatch_training, mismatch_seq)
FINAL_KEYS = {learning_curves.STUDY: learning_curves.FINAL_KEYS}


def redraw(root: str = common.RESULTS) -> dict:
  """{study: [figure file names redrawn]}; each study's `results.json` lists its figures."""
  out = {}
  for mod in STUDIES:
    d = os.path.join(root, mod.STUDY)
    path = os.path.join(d, "results.json")
    res = json.load(open(path))
    curve, n_seeds = res["curves"], len(res["config"]["seeds"])
    names = list(curve)
    figs = mod.curve_figures(d, curve, names, n_seeds)
    figs.append(toy_grid.final_figure(d, res["final"], names, n_seeds,
                                      res["config"]["heldout_prompts"],
                                      FINAL_KEYS.get(mod.STUDY, toy_grid.HELDOUT_CSR)))
    stale = os.path.join(d, "heldout_curves.png")
    if "evals" not in res and os.path.exists(stale):
      os.remove(stale)
    listed = [f for f in res["figures"] if os.path.exists(os.path.join(d, f))]
    res["figures"] = listed + [f for f in figs if f not in listed]
    common.write_json(path, res)
    out[mod.STUDY] = figs
  return out


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--root", default=common.RESULTS)
  for study, figs in redraw(ap.parse_args(argv).root).items():
    print(f"{study}: {', '.join(figs)}")


if __name__ == "__main__":
  main()
