"""bench/device/run.py --dry-run: the GPU check's script end to end on CPU with tiny shapes
(every section runs, parity holds, the JSON and the table are written)."""
import json
import os

import pytest

from bench.device import run as device


@pytest.mark.slow
def test_device_check_dry_run(tmp_path):
  rc = device.main(["--dry-run", "--out", str(tmp_path)])
  res = json.loads((tmp_path / "device.json").read_text())
  errors = {k: v["error"] for k, v in res.items() if isinstance(v, dict) and "error" in v}
  assert not errors, errors
  assert rc == 0
  p = res["parity"]
  assert p["ok"] and p["implementation"] == "xla" and not p["cudnn_kernel_in_program"]
  assert p["decoder_hidden_max_abs_diff"] < 0.05 * p["decoder_hidden_scale"]
  assert res["env"]["platform"] == "cpu"
  step = res["step"]["tiny"]
  assert step["loss_finite"] and step["tokens_per_s"] > 0 and step["flops"] > 0
  assert res["sampler"]["batch_16"]["new_tokens_per_s"] > 0
  assert res["main_job"]["stage_times"]["time/step"]
  table = (tmp_path / "device_table.md").read_text()
  for row in ("GRPO step tiny", "sampler batch_16", "main job configs/cort_grpo.py:tiny"):
    assert row in table
  assert os.path.exists(tmp_path / "device.json")
