"""Your own data and rewards on :tiny, end to end; runs that never lose results; export.

One JSONL run (2 steps: x+/x- from prompt_minus and from rendered criteria, a weighted
sum of csr and a custom `module:fn` reward) is reused: a finished rerun is a no-op, a
corrupt latest checkpoint falls back to the previous step, metrics stay deduplicated,
a different config is refused before anything is written, and the run exports to a
Hugging Face directory that transformers loads with the same logits.
"""
import json
import os
import shutil
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from configs import cort_grpo  # noqa: E402
from rljax.metrics_log import read_metrics  # noqa: E402
from rljax.trainer import Trainer  # noqa: E402
from rljax.workdir import WorkdirError  # noqa: E402

LOWER = {"instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]}
RECORDS = [
    {"prompt": "Name a fruit.", **LOWER},  # criteria rendered: x+ = request + criterion
    {"prompt": "Name a color. Answer in lowercase letters only.",
     "prompt_minus": "Name a color.", **LOWER},
    {"prompt": "Name an animal.", **LOWER},
    {"prompt": "Name a city. Use only lowercase.", "prompt_minus": "Name a city.", **LOWER},
]

IFBENCH = [
    {"key": 1, "prompt": "Say hi. The output should not contain any whitespace.",
     "instruction_id_list": ["format:no_whitespace"], "kwargs": [{}]},
    {"key": 2, "prompt": "Name a fruit. Include exactly 1 numbers in the response.",
     "instruction_id_list": ["count:numbers"], "kwargs": [{"N": 1}]},
]


def _cfg(tmp_path, **over):
  cfg = cort_grpo.get_config("tiny")
  cfg.data.data_dir = str(tmp_path / "tfds")
  cfg.checkpoint.every, cfg.train.steps = 1, 2
  cfg.rollout.num_generations, cfg.data.batch_size = 4, 8  # 8 rows: one per fake device
  cfg.train.inner_epochs, cfg.train.num_minibatches = 1, 1
  for k, v in over.items():
    node = cfg
    *path, leaf = k.split(".")
    for p in path:
      node = node[p]
    node[leaf] = v
  return cfg


@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("jsonl")
  data = tmp / "prompts.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
  ifbench = tmp / "ifbench_style.jsonl"  # held-out eval on IFBench-format records
  ifbench.write_text("".join(json.dumps(r) + "\n" for r in IFBENCH))
  over = {"data.dataset": "jsonl", "data.path": str(data), "eval.path": str(ifbench),
          "reward.terms": ({"name": "csr", "weight": 1.0},
                           {"name": "examples.my_rewards:short",
                            "weight": 0.5, "limit": 8})}
  wd = str(tmp / "run")
  final = Trainer(_cfg(tmp, **over), wd).run()
  return tmp, wd, over, final


def test_jsonl_dataset_and_weighted_custom_reward_train(jsonl_run):
  _, wd, _, final = jsonl_run
  recs = read_metrics(wd)
  assert [r["step"] for r in recs] == [1, 2]
  for key in ("reward/mean", "reward/csr", "eval/prompt_level_strict", "eval/reward_mean",
              "eval/ifbench_prompt_level_strict", "eval/ifbench_instruction_level_strict"):
    assert key in final, key
  assert final["reward/mean"] == pytest.approx(recs[-1]["reward/mean"])
  # each term logged as term/<name>; the reward is their weighted sum
  for r in recs:
    assert r["reward/mean"] == pytest.approx(
        r["term/csr"] + 0.5 * r["term/examples.my_rewards:short"], abs=1e-6)
  samples = [json.loads(line) for line in open(os.path.join(wd, "samples.jsonl"))]
  assert samples and all(s["step"] == 2 and "response" in s for s in samples)
  # reward = csr + 0.5 * short: each sample's reward is one of {0, .5, 1, 1.5}
  assert all(s["reward"] in (0.0, 0.5, 1.0, 1.5) for s in samples)


def test_rerun_of_finished_run_is_a_noop(jsonl_run, capsys):
  tmp, wd, over, final = jsonl_run
  before = {f: open(os.path.join(wd, f)).read() for f in ("final_metrics.json", "metrics.jsonl")}
  again = Trainer(_cfg(tmp, **over), wd).run()
  assert "already finished" in capsys.readouterr().out
  assert again == final
  assert {f: open(os.path.join(wd, f)).read() for f in before} == before


def test_different_config_refused_before_anything_is_written(jsonl_run):
  tmp, wd, over, _ = jsonl_run
  saved = open(os.path.join(wd, "config.json")).read()
  with pytest.raises(WorkdirError, match=r"objective\.loss.*rollout\.max_new_tokens.*"
                     r"Use a new --workdir \(e\.g\. .*run_2\)"):
    Trainer(_cfg(tmp, **over, **{"objective.loss": "dapo", "rollout.max_new_tokens": 5}), wd)
  assert open(os.path.join(wd, "config.json")).read() == saved


def test_export_round_trip_through_transformers(jsonl_run):
  torch = pytest.importorskip("torch")
  import transformers
  from rljax.export import export_run
  from rljax.models import load_model
  tmp, wd, _, _ = jsonl_run
  out = export_run(wd, str(tmp / "hf"))
  for f in ("model.safetensors", "config.json", "tokenizer.json"):
    assert os.path.exists(os.path.join(out, f)), f
  mode = lambda f: os.stat(os.path.join(out, f)).st_mode & 0o777
  assert mode("model.safetensors") == mode("config.json")  # not save_file's 0600
  tok = transformers.AutoTokenizer.from_pretrained(out)
  hf = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
  ids = tok(["name a fruit"], return_tensors="pt")["input_ids"]
  with torch.no_grad():
    ref = hf(ids).logits.numpy()
  ours = load_model(out)
  import jax.numpy as jnp
  from rljax.models import positions_from_mask
  x, m = jnp.asarray(ids.numpy()), jnp.ones(ids.shape, jnp.int32)
  hidden, _ = ours(x, positions_from_mask(m), m)
  logits = np.asarray(hidden @ ours.unembed_DxV())
  assert np.abs(logits - ref).max() < 1e-3
  # the exported weights are the trained ones (step 2), not the initial random ones
  from rljax.export import run_config, template_model
  init, _ = template_model(run_config(wd))
  assert json.load(open(os.path.join(out, "rljax_export.json")))["step"] == 2
  assert not np.allclose(np.asarray(init.unembed_DxV()), np.asarray(ours.unembed_DxV()))


def test_corrupt_latest_checkpoint_falls_back_and_metrics_stay_unique(jsonl_run):
  tmp, wd, over, _ = jsonl_run
  step2 = os.path.join(wd, "checkpoints", "last", "2")
  for root, _, files in os.walk(os.path.join(step2, "state")):
    for f in files:
      with open(os.path.join(root, f), "r+b") as fh:
        fh.write(b"\0garbage\0" * 4)
  os.remove(os.path.join(wd, "final_metrics.json"))
  with pytest.warns(UserWarning, match="unreadable.*corrupt-2"):
    final = Trainer(_cfg(tmp, **over), wd).run()
  assert os.path.isdir(os.path.join(wd, "checkpoints", "corrupt-2"))
  steps = [json.loads(line)["step"] for line in open(os.path.join(wd, "metrics.jsonl"))]
  assert steps == [1, 2]
  assert "reward/mean" in final


def test_math_dataset_trains_with_math_accuracy(tmp_path):
  cfg = _cfg(tmp_path, **{"data.dataset": "math", "reward.name": "math_accuracy",
                          "train.steps": 1, "eval.num_prompts": 2, "objective.transforms": (),
                          "objective.transform_kwargs": {}, "data.max_replay_prompt_len": 160})
  final = Trainer(cfg, str(tmp_path / "math")).run()
  assert "reward/mean" in final and "eval/reward_mean" in final
  assert "eval/prompt_level_strict" not in final  # no IF criteria in math tasks


def test_numeric_rows_keeps_per_response_numbers_only():
  from rljax.loop import numeric_rows
  assert numeric_rows([[True], [False, True]], 2) is None  # ragged per-criterion lists
  assert numeric_rows(["a", "b"], 2) is None
  assert numeric_rows([0.5, 1.0, 0.0], 2) is None  # not one per response
  np.testing.assert_array_equal(numeric_rows([0.5, 1.0], 2), [0.5, 1.0])


def test_rubric_prompts_with_several_criteria_train(tmp_path):
  """The main job's data (1 to 3 criteria per prompt): the reward's per-criterion lists are
  ragged across responses and must not reach the numeric rollout info (this crashed the
  README's main job at its first rollout)."""
  cfg = _cfg(tmp_path, **{"data.min_criteria": 1, "data.max_criteria": 3,
                          "data.instruction_ids": (), "data.batch_size": 32,
                          "train.steps": 1, "eval.num_prompts": 2})
  final = Trainer(cfg, str(tmp_path / "rubric3")).run()
  assert np.isfinite(final["reward/mean"])


def test_eval_at_start_and_cort_token_weight_heatmap(tmp_path):
  """The main job's curve starts at a step-0 held-out eval, and the run leaves a heat-map of
  CoRT's token weights: w̃ = Â/A of the step's own replay + transform chain, which must equal
  SPEC §3's w̃ recomputed from the logged Δ and λ (η = 0.5, τ = 1, per-response mean 1)."""
  import jax.numpy as jnp
  from rljax.objectives import CortConfig, cort_weights
  cfg = _cfg(tmp_path, **{"eval.at_start": True, "log.plot": True, "eval.every": 1,
                          "eval.num_samples": 2,
                          "objective.transform_kwargs": {"cort": {"ramp_steps": 1}}})
  wd = str(tmp_path / "heat")
  Trainer(cfg, wd).run()
  recs = read_metrics(wd)
  assert [r["step"] for r in recs] == [0, 1, 2]
  assert all("eval/prompt_level_strict" in r for r in recs)  # at start and every step
  samples = [json.loads(line)["step"] for line in open(os.path.join(wd, "samples.jsonl"))]
  assert samples == [0, 0, 1, 1, 2, 2]
  assert os.path.getsize(os.path.join(wd, "plots", "cort_weights.png")) > 10_000
  rec = json.load(open(os.path.join(wd, "cort_weights.json")))
  assert rec["lambda"] == 1.0 and rec["rows"]
  complete = [row["complete"] for row in rec["rows"]]  # complete answers are shown first
  assert complete == sorted(complete, reverse=True)
  for row in rec["rows"]:
    delta = jnp.asarray([row["delta"]])
    want, _ = cort_weights(delta, jnp.ones_like(delta), jnp.float32(rec["lambda"]),
                           CortConfig())
    np.testing.assert_allclose(row["w"], np.asarray(want)[0], atol=1e-5)
    assert len(row["tokens"]) == len(row["ids"]) == len(row["w"])
    assert np.std(row["w"]) > 0  # Δ differs across tokens


def test_sampled_eval_is_fixed_draws_scored_like_greedy(tmp_path):
  """`eval.sampled = k`: k samples per held-out prompt at the rollout's temperature from one
  fixed key. Its metrics are the IFEval metrics of those k·n responses (recomputed here from
  the sampler's own output with the same key) and the same at every call."""
  from rljax.loop.run_state import Keys
  from rljax.rewards.evaluation import heldout_metrics
  cfg = _cfg(tmp_path, **{"eval.sampled": 3, "eval.num_prompts": 4})
  t = Trainer(cfg, str(tmp_path / "sampled"))
  ev = t.evaluate(t.policy())
  assert ev == t.evaluate(t.policy())  # fixed draws
  c, exs = t.evaluate.collector, t.evaluate.examples
  prompts = c.encoder.encode(exs, replay=False)
  r, _ = c.generate(t.policy(), prompts, Keys.eval_sampled(),
                    c.sampler_cfg.replace(num_generations=3, record_topk=0), len(exs),
                    replay=False)
  texts = c.tokenizer.batch_decode([row[m > 0] for row, m in zip(r.tokens_BxN, r.mask_BxN)],
                                   skip_special_tokens=True)
  want = heldout_metrics([e for e in exs for _ in range(3)], texts, t.evaluate.reward_fn)
  for k in ("prompt_level_strict", "instruction_level_strict", "reward_mean"):
    np.testing.assert_allclose(ev[f"eval/sampled/{k}"], want[k], rtol=1e-6)
  np.testing.assert_allclose(ev["eval/sampled/length_mean"], np.asarray(r.mask_BxN).sum(1).mean())
  assert ev["eval/sampled/length_clip_ratio"] == np.asarray(r.truncated_B).mean()
  assert len(set(texts)) > 1 and ev["eval/length_clip_ratio"] in (0.0, 0.25, 0.5, 0.75, 1.0)
