"""Weights & Biases tracking in offline mode: the run logged beside metrics.jsonl holds the
same numbers at the same steps, the resolved config, and resumes the same run id."""
import math
import os

from rljax.metrics_log import read_metrics
from rljax.tracking import read_history
from tests.trainer.test_loop import _run


def test_offline_wandb_run_equals_metrics_jsonl(tmp_path):
  over = {"train.steps": 2, "checkpoint.every": 0, "eval.every": 2,
          "log.wandb.enabled": True, "log.wandb.mode": "offline"}
  _, wd = _run(tmp_path, **over)
  jsonl = read_metrics(wd)
  hist = read_history(wd)
  by_step = {}
  for h in hist:  # the held-out samples table sits beside the metrics as samples/*
    by_step.setdefault(int(h["_step"]), {}).update(
        {k: v for k, v in h.items() if not k.startswith(("_", "samples"))})
  assert sorted(by_step) == [r["step"] for r in jsonl] == [1, 2]
  for rec in jsonl:
    logged = by_step[rec["step"]]
    want = {k: v for k, v in rec.items() if k != "step"}
    assert set(logged) == set(want)
    for k, v in want.items():
      assert logged[k] == v or (math.isnan(v) and math.isnan(logged[k])), (k, v, logged[k])
  assert any(k.startswith("samples/") for h in hist for k in h)  # the held-out samples
  run_id = open(os.path.join(wd, "wandb_run_id")).read().strip()
  assert len(run_id) >= 8 and any(run_id in d for d in os.listdir(os.path.join(wd, "wandb")))
