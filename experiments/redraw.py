"""Redraws the training-curve figures of studies 4, 5 and 5b from their committed
`results.json` (the per-seed curves are stored there), with the bands every figure uses:
± one std over seeds, ddof = 1 (`toy_grid.seed_std`). Nothing is rerun.

    python -m experiments.redraw [--root experiments/results]

Their held-out curves (`heldout_curves.png`) need every evaluation of every seed, which
those results files do not hold: they are redrawn only by rerunning the study.
"""
from __future__ import annotations

import argparse
import json
import os

from experiments import common, learning_curves, mismatch_seq, mismatch_training

STUDIES = (learning_curves, mismatch_training, mismatch_seq)


def redraw(root: str = common.RESULTS) -> dict:
  """{study: [figure file names redrawn]}."""
  out = {}
  for mod in STUDIES:
    d = os.path.join(root, mod.STUDY)
    res = json.load(open(os.path.join(d, "results.json")))
    curve = res["curves"]
    out[mod.STUDY] = mod.curve_figures(d, curve, list(curve), len(res["config"]["seeds"]))
  return out


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--root", default=common.RESULTS)
  for study, figs in redraw(ap.parse_args(argv).root).items():
    print(f"{study}: {', '.join(figs)}")


if __name__ == "__main__":
  main()
