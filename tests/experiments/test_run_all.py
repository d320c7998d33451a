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
  # the training-curve figures redraw from results.json alone
  from experiments.redraw import redraw
  for study, figs in redraw(str(tmp_path)).items():
    assert figs and all(os.path.getsize(tmp_path / study / f) > 0 for f in figs), study


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


def test_mismatch_signal_unit_is_the_expected_greedy_token_gradient():
  """Study 3's drift unit: Σ_y p_y r(y) ∇_logits log p(y) with r = 1 on the most likely token,
  summed over the whole vocabulary, equals `signal_logits`."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from experiments.mismatch_bias import signal_logits
  rng = np.random.default_rng(1)
  logp = jax.nn.log_softmax(jnp.asarray(2 * rng.normal(size=(3, 30)), jnp.float32))
  p = np.exp(np.asarray(logp, np.float64))
  for t in range(3):
    r = (np.arange(30) == np.argmax(p[t])).astype(np.float64)
    want = sum(p[t, y] * r[y] * (np.eye(30)[y] - p[t]) for y in range(30))  # ∇ log p(y) = e_y − p
    np.testing.assert_allclose(np.asarray(signal_logits(logp))[t], want, atol=1e-6)
