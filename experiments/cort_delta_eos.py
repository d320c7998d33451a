"""Study 2b — study 2 with answers that end: the same 200 held-out prompts, Δ, labels and
analysis as `cort_delta`, but up to 512 new tokens and, for an answer cut at the cap, up to 4
draws per prompt, keeping the first that ended with a stop token
(`cort_delta.generate_until_eos`). Study 2 cut 75 % of its answers at 96 tokens, so the
end-anchored criteria (end phrase, postscript, quotes, JSON) were mostly missing; here the
end of the answer is in the data.

    python -m experiments.cort_delta_eos [--quick] [--out DIR] [--seed S]

Writes results/cort_delta_eos/ (results.json with every token's Δ and label, table.md, the
two figures). The redraws prefer answers that end: a bias towards shorter answers, stated
with the results (`ended_fraction`, `draws_mean`).
"""
from __future__ import annotations

from experiments import common, cort_delta

STUDY = "cort_delta_eos"
FULL = {"max_new_tokens": 512, "tries": 4, "batch": 20}
QUICK = {"max_new_tokens": 24, "tries": 2}


def run(out: str, quick: bool = False, seed: int = 0) -> dict:
  return cort_delta.run(out, quick, seed, study=STUDY, **(QUICK if quick else FULL))


def main(argv=None):
  common.study_main(STUDY, run, __doc__, argv)


if __name__ == "__main__":
  main()
