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
  drawn = redraw(str(tmp_path))
  # study 5b's quick version has one arm, alone in its sampler: no curve figure to draw
  assert drawn["learning_curves"] and drawn["mismatch_training"], drawn
  for study, figs in drawn.items():
    assert all(os.path.getsize(tmp_path / study / f) > 0 for f in figs), study
    assert "heldout_final.png" in figs, study
    listed = json.load(open(tmp_path / study / "results.json"))["figures"]
    # the quick runs store every evaluation, so their held-out curves stay listed and drawn
    assert "heldout_curves.png" in listed, study
    assert all((tmp_path / study / f).exists() for f in listed), study


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
    # ∇_logits log p(y) = e_y − p
    want = sum(p[t, y] * r[y] * (np.eye(30)[y] - p[t]) for y in range(30))
    np.testing.assert_allclose(np.asarray(signal_logits(logp))[t], want, atol=1e-6)


def test_generate_until_eos_keeps_ended_rows_and_redraws_cut_ones():
  """Study 2b's sampler: rows that ended keep their first draw, cut rows take the next draw
  (new keys) wholesale, up to `tries`; with tries = 1 it is `generate` itself."""
  import jax
  import numpy as np
  from experiments.cort_delta import generate_until_eos
  from rljax.models import create_model
  from rljax.rollout import SamplerConfig, generate
  from tests.test_train_step import CFG
  model = create_model(CFG)
  ids = np.tile(np.arange(1, 7, dtype=np.int32), (12, 1))
  mask = np.ones_like(ids)
  scfg = SamplerConfig(max_new_tokens=5, temperature=1.0, stop_token_ids=(3, 4, 5, 6, 7),
                       pad_token_id=0)
  key = jax.random.key(2)
  r1 = generate(model, ids, mask, key, scfg)
  one, used1 = generate_until_eos(model, ids, mask, key, scfg, tries=1)
  np.testing.assert_array_equal(np.asarray(one.tokens_BxN), np.asarray(r1.tokens_BxN))
  assert (used1 == 1).all()
  cut = np.asarray(r1.truncated_B)
  assert cut.any() and (~cut).any(), cut  # the case needs both kinds of rows
  r2 = generate(model, ids, mask, jax.random.fold_in(key, 10_001), scfg)
  two, used = generate_until_eos(model, ids, mask, key, scfg, tries=2)
  want = np.where(cut[:, None], np.asarray(r2.tokens_BxN), np.asarray(r1.tokens_BxN))
  np.testing.assert_array_equal(np.asarray(two.tokens_BxN), want)
  np.testing.assert_array_equal(np.asarray(two.truncated_B),
                                np.where(cut, np.asarray(r2.truncated_B), False))
  np.testing.assert_array_equal(used, 1 + cut)
