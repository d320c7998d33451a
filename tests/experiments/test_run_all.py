"""`python -m experiments.run_all --quick` runs every study and each writes its outputs."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_run_all_quick_writes_every_study(tmp_path):
  from experiments.run_all import STUDIES, expected_outputs
  env = dict(os.environ, PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, "-m", "experiments.run_all", "--quick", "--out",
                         str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == 0, proc.stderr[-4000:]
  for study in STUDIES:
    files = expected_outputs(str(tmp_path), study)
    assert len(files) >= 3, f"{study} lists no figure"
    for f in files:
      assert os.path.getsize(f) > 0, f"{study}: {f} missing or empty"
    res = json.load(open(os.path.join(tmp_path, study, "results.json")))
    assert {"config", "runtime_s", "environment"} <= set(res), study
    assert res["config"]["seed"] == 0
  assert json.load(open(tmp_path / "run_all_quick.json"))["quick"] is True


def test_closed_form_expectation_matches_library_losses():
  """The mismatch study's exact-over-the-next-token update equals the brute-force sum of
  the library losses' gradients over every action, for all eight estimators."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from experiments.estimators import (ESTIMATORS, SC_FAMILY, brute_force_ascent_logits,
                                      expected_ascent_logits)
  rng = np.random.default_rng(0)
  logits = jnp.asarray(3 * rng.gumbel(size=40), jnp.float32)
  logq = jax.nn.log_softmax(logits + jnp.asarray(rng.normal(size=40), jnp.float32))
  for name in ESTIMATORS:
    for adv in (1.0, -0.7):
      bf = brute_force_ascent_logits(name, logits, logq, adv, k=6)
      cf = expected_ascent_logits(name, jax.nn.log_softmax(logits)[None], logq[None],
                                  jnp.array([adv]), k=6)[0]
      np.testing.assert_allclose(cf, bf, atol=2e-6, err_msg=name)
      if name in SC_FAMILY and name != "top-k SC":
        assert float(jnp.abs(bf).max()) < 1e-6, name  # exact centering: no drift
  assert float(jnp.abs(brute_force_ascent_logits("PG", logits, logq, 1.0)).max()) > 1e-3
