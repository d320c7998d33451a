"""Runs every study: `python -m experiments.run_all [--quick] [--out DIR] [--only NAME ...]`.

Without --quick the results land in experiments/results/<study>/ (what is committed);
--quick is the minutes-long smoke version and writes to a fresh temporary folder unless
--out is given, so it never overwrites the committed results.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

from experiments import (async_staleness, common, cort_delta, cort_delta_eos, learning_curves,
                         long_credit, mismatch_bias, mismatch_seq, mismatch_training,
                         sc_damaging, score_centering_toy, smollm2_cort, verdicts)

# verdicts last: it judges the committed results of the training studies (it reruns nothing)
STUDIES = {m.STUDY: m for m in (score_centering_toy, cort_delta, cort_delta_eos, mismatch_bias,
                                learning_curves, long_credit, mismatch_training, mismatch_seq,
                                sc_damaging, async_staleness, smollm2_cort, verdicts)}


def expected_outputs(out_root: str, study: str) -> list[str]:
  """The files a finished study must have written (results.json lists its figures)."""
  d = os.path.join(out_root, study)
  with open(os.path.join(d, "results.json")) as f:
    figs = json.load(f)["figures"]
  return [os.path.join(d, n) for n in ["results.json", "table.md", *figs]]


def main(argv=None) -> str:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="smoke version (minutes)")
  ap.add_argument("--out", default=None, help="root folder (default: experiments/results, "
                  "or a temporary folder with --quick)")
  ap.add_argument("--only", nargs="*", default=None, choices=sorted(STUDIES))
  ap.add_argument("--seed", type=int, default=0)
  a = ap.parse_args(argv)
  root = a.out or (tempfile.mkdtemp(prefix="rljax_experiments_quick_") if a.quick
                   else common.RESULTS)
  runtimes = {}
  for name in a.only or list(STUDIES):
    timer = common.Timer()
    STUDIES[name].run(common.out_dir_for(name, root), quick=a.quick, seed=a.seed)
    runtimes[name] = timer()
    print(f"[run_all] {name}: {runtimes[name]} s -> {os.path.join(root, name)}", flush=True)
  common.write_json(os.path.join(root, "run_all_quick.json" if a.quick else "run_all.json"),
                    {"quick": a.quick, "seed": a.seed, "runtime_s": runtimes})
  return root


if __name__ == "__main__":
  main()
