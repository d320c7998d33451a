"""Bad input to `python -m rljax.train`: each ends with exit != 0, at most 3 lines on stderr
naming the file, line or key, and nothing left in the workdir; a fixed rerun then starts.

Run in-process through `rljax.train.main` with the file descriptors captured (`capfd`: what
native code prints counts too) and Python warnings counted as stderr lines.
"""
import json
import os
import shutil
import sys
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from rljax import train  # noqa: E402

GOOD = {"prompt": "Name a fruit.", "instruction_id_list": ["change_case:english_lowercase"],
        "kwargs": [{}]}
BASE = ["--config", "configs/cort_grpo.py:tiny", "--config.train.steps=1",
        "--config.eval.num_prompts=0", "--config.checkpoint.async_save=False"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """Prompt files, a reward module and model directories (a tiny random model exported as
  Hugging Face safetensors with the bundled tokenizer), good and broken."""
  d = tmp_path_factory.mktemp("inputs")
  (d / "malformed.jsonl").write_text(json.dumps(GOOD) + "\n" + '{"prompt": "Name a color.",\n')
  (d / "missing.jsonl").write_text(json.dumps(GOOD) + "\n" + json.dumps(
      {k: v for k, v in GOOD.items() if k != "prompt"}) + "\n")
  (d / "good.jsonl").write_text("".join(json.dumps(dict(GOOD, prompt=f"Name fruit {i}.")) + "\n"
                                        for i in range(16)))
  (d / "bad_rewards.py").write_text(
      "def broken(response, example):\n  raise KeyError('score')\n\n"
      "def fine(response, example):\n  return float(response == response.lower())\n")
  from rljax.models import create_model, export_model
  from rljax.models.bundled import resolve
  from rljax.models.config import ModelConfig
  from rljax.models.tokenizer import load_tokenizer
  tok = load_tokenizer(resolve("smollm2"))
  cfg = ModelConfig(model_type="qwen3", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                    hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                    num_kv_heads=1, head_dim=16, tie_embeddings=True)
  hf = str(d / "hf")
  export_model(create_model(cfg), hf)
  tok.save_pretrained(hf)
  trunc = str(d / "hf_truncated")
  shutil.copytree(hf, trunc)
  st = os.path.join(trunc, "model.safetensors")
  with open(st, "r+b") as f:
    f.truncate(os.path.getsize(st) // 2)
  noconfig = str(d / "hf_no_config")
  shutil.copytree(hf, noconfig)
  os.remove(os.path.join(noconfig, "config.json"))
  (d / "a_file").write_text("not a directory\n")
  sys.path.insert(0, str(d))
  yield d
  sys.path.remove(str(d))


def _unwritable(tmp_path) -> str:
  """A directory this process cannot create files in: permission bits where they bind
  (not root), else sysfs (read-only even for root)."""
  if os.geteuid() != 0:
    ro = tmp_path / "read_only"
    ro.mkdir()
    ro.chmod(0o555)
    return str(ro / "run")
  return "/sys/rljax_test_run"


def _run(args, capfd):
  """(exit code, stderr lines incl. warnings) of `python -m rljax.train args`."""
  capfd.readouterr()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with pytest.raises(SystemExit) as e:
      train.main(BASE + args)
  err = capfd.readouterr().err
  lines = [line for line in err.splitlines() if line.strip()]
  return e.value.code, lines + [str(w.message) for w in caught]


CASES = {  # name: (extra args, what the message must name)
    "malformed_jsonl": (["--config.data.dataset=jsonl", "--config.data.path={d}/malformed.jsonl"],
                        "malformed.jsonl:2: malformed JSON"),
    "missing_field": (["--config.data.dataset=jsonl", "--config.data.path={d}/missing.jsonl"],
                      "missing.jsonl:2: needs a non-empty string 'prompt'"),
    "truncated_safetensors": (["--config.model.tiny=False", "--config.model.path={d}/hf_truncated"],
                              "model.safetensors:model.embed_tokens.weight: truncated file"),
    "no_config_json": (["--config.model.tiny=False", "--config.model.path={d}/hf_no_config"],
                       "config.model.path={d}/hf_no_config: no config.json"),
    "missing_eval_file": (["--config.eval.path={d}/nothere.jsonl"],
                          "config.eval.path={d}/nothere.jsonl: no such file"),
    "raising_reward": (["--config.reward.name=bad_rewards:broken"],
                       "reward 'bad_rewards:broken' raised KeyError: 'score'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_leaves_no_workdir(case, files, tmp_path, capfd):
  args, want = CASES[case]
  wd = str(tmp_path / "run")
  code, err = _run([a.format(d=files) for a in args] + [f"--workdir={wd}"], capfd)
  assert code == 1, err
  assert len(err) <= 3, err
  assert want.format(d=files) in err[0], err
  assert err[0].startswith("python -m rljax.train: error: "), err
  assert not os.path.exists(wd), os.listdir(wd)


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_a_workdir_that_cannot_hold_a_run_is_refused(kind, files, tmp_path, capfd):
  wd = str(files / "a_file") if kind == "file" else _unwritable(tmp_path)
  if kind == "unwritable":
    probe = os.path.join(os.path.dirname(wd), "probe")
    try:  # the premise: the path really cannot be written
      os.makedirs(probe)
      os.rmdir(probe)
      pytest.skip(f"{os.path.dirname(wd)} is writable here")  # pragma: no cover
    except OSError:
      pass
  code, err = _run([f"--workdir={wd}"], capfd)
  assert code == 2 and len(err) == 1, err
  assert wd in err[0] and ("is not a directory" in err[0] or "cannot write there" in err[0])
  assert kind == "file" or not os.path.exists(wd)


def test_debug_verbosity_raises_with_the_traceback(files, tmp_path):
  from rljax.rewards.jsonl import RecordError
  with pytest.raises(RecordError, match="malformed.jsonl:2"):
    train.main(BASE + ["--config.data.dataset=jsonl", f"--config.data.path={files}/malformed.jsonl",
                       f"--workdir={tmp_path / 'run'}", "--verbosity=debug"])
  assert not os.path.exists(tmp_path / "run")


def test_a_run_that_failed_at_step_1_is_rerun_in_the_same_workdir(files, tmp_path, capfd):
  """The reward raises at step 1: the prepared data, config.json and empty checkpoint
  folders are removed, and the fixed command runs in the same workdir."""
  wd = str(tmp_path / "run")
  own = ["--config.data.dataset=jsonl", f"--config.data.path={files}/good.jsonl",
         f"--workdir={wd}"]
  code, err = _run(own + ["--config.reward.name=bad_rewards:broken"], capfd)
  assert code == 1 and "nothing was kept in" in err[-1], err
  assert not os.path.exists(wd)
  assert train.main(BASE + own + ["--config.reward.name=bad_rewards:fine"]) == 0
  assert [json.loads(x)["step"] for x in open(os.path.join(wd, "metrics.jsonl"))] == [1]


def test_an_existing_workdir_keeps_what_it_held(files, tmp_path, capfd):
  """A failure in a directory the user made keeps what was there before the run."""
  wd = tmp_path / "mine"
  wd.mkdir()
  (wd / "notes.txt").write_text("mine\n")
  code, err = _run(["--config.data.dataset=jsonl", f"--config.data.path={files}/missing.jsonl",
                    f"--workdir={wd}"], capfd)
  assert code == 1 and len(err) <= 3, err
  assert os.listdir(wd) == ["notes.txt"]
