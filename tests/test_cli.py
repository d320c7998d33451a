"""One CLI style: config overrides, --print_config, unknown keys in one line, --help;
default workdirs; sweep summaries merged; a truncated metrics line does not crash plot."""
import json
import os
import subprocess
import sys

import pytest

from rljax import cli, sweep, train, workdir
from rljax.metrics_log import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
  monkeypatch.chdir(ROOT)


def test_unknown_key_is_one_line_with_the_closest_key(capsys):
  with pytest.raises(SystemExit) as e:
    train.main(["--config", "configs/cort_grpo.py:tiny", "--config.optim.learning_rate=1e-5"])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0
  assert "unknown config key 'optim.learning_rate'; did you mean 'optim.lr'?" in err


def test_bad_value_type_names_the_key(capsys):
  with pytest.raises(SystemExit):
    train.main(["--config", "configs/cort_grpo.py:tiny", "--config.train.steps=many"])
  assert "--config.train.steps=many: expected int" in capsys.readouterr().err


def test_print_config_shows_resolved_values(capsys):
  with pytest.raises(SystemExit) as e:
    train.main(["--config", "configs/cort_grpo.py:tiny", "--config.optim.lr", "0.5",
                "--config.objective.transforms=cort,tis", "--print_config"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert "lr: 0.5" in out and "- tis" in out and "steps: 4" in out


def test_every_remat_policy_is_reachable_from_the_command_line(capsys, tmp_path):
  """model.remat is a string ("none" | "dots" | "full"): with a bool default, "dots" (the
  CPU memory setting of bench/README.md) could not be set from the command line."""
  for mode in ("none", "dots", "full"):
    with pytest.raises(SystemExit) as e:
      train.main(["--config", "configs/cort_grpo.py:tiny", f"--config.model.remat={mode}",
                  "--print_config"])
    assert e.value.code == 0
    assert f"remat: {mode}" in capsys.readouterr().out
  with pytest.raises(SystemExit) as e:
    train.main(["--config", "configs/cort_grpo.py:tiny", "--config.model.remat=some",
                "--workdir", str(tmp_path / "run")])
  assert "config.model.remat: 'some'" in str(e.value.code) + capsys.readouterr().err


def test_help_lists_config_keys(capsys):
  with pytest.raises(SystemExit):
    train.main(["--config", "configs/cort_grpo.py", "--help"])
  out = capsys.readouterr().out
  assert "optim.lr = 1e-06" in out and "--print_config" in out and "--verbosity" in out


@pytest.mark.parametrize("module", ["rljax.rewards.evaluation", "rljax.export", "rljax.plot",
                                    "rljax.sweep", "rljax.train"])
def test_every_entry_point_has_help(module):
  out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith("usage: python -m " + module) and "--verbosity" in out.stdout
  assert "Warning" not in out.stderr


def test_variant_never_defaults_to_the_main_runs_workdir():
  assert train.default_workdir("configs/cort_grpo.py") == os.path.join("runs", "cort_grpo")
  assert train.default_workdir("configs/cort_grpo.py:tiny") == os.path.join("runs",
                                                                            "cort_grpo_tiny")


def test_parse_value_types():
  assert cli.parse_value("3", 1, "k") == 3 and cli.parse_value("3", 1.0, "k") == 3.0
  assert cli.parse_value("False", True, "k") is False
  assert cli.parse_value("(8, 1, 1)", (1, -1, 1), "k") == (8, 1, 1)
  with pytest.raises(cli.CliError, match="expected float"):
    cli.parse_value("fast", 1e-6, "optim.lr")


def test_sweep_summary_is_merged_never_wiped(tmp_path):
  d = str(tmp_path)
  sweep.write_summary(d, [{"run": "a", "reward/mean": 0.5}, {"run": "b", "reward/mean": 0.25}])
  sweep.write_summary(d, [{"run": "b", "reward/mean": 0.75}])  # --index 1 alone
  rows = json.load(open(os.path.join(d, "summary.json")))
  assert rows == [{"run": "a", "reward/mean": 0.5}, {"run": "b", "reward/mean": 0.75}]
  md = open(os.path.join(d, "summary.md")).read()
  assert "| a | 0.5 |" in md and "| b | 0.75 |" in md


def test_truncated_metrics_line_does_not_crash_plot(tmp_path):
  from rljax.plot import plot_runs
  p = tmp_path / "metrics.jsonl"
  p.write_text('{"step": 1, "reward/mean": 0.1}\n{"step": 2, "reward/mean": 0.2}\n{"step": 3, "rew')
  with pytest.warns(UserWarning, match=r"metrics\.jsonl:3: skipping"):
    recs = read_metrics(str(tmp_path))
  assert [r["step"] for r in recs] == [1, 2]
  with pytest.warns(UserWarning):
    assert len(plot_runs([str(tmp_path)], str(tmp_path / "plots"))) == 3  # cort, rewards, mismatch


def test_trim_metrics_keeps_one_record_per_step(tmp_path):
  p = tmp_path / "metrics.jsonl"
  p.write_text("".join(json.dumps({"step": s, "v": i}) + "\n"
                       for i, s in enumerate([1, 2, 3, 4, 5, 4, 5])))
  assert workdir.trim_metrics(str(p), 3) == 4
  assert [json.loads(line)["step"] for line in open(p)] == [1, 2, 3]


def test_gloo_lines_are_dropped_from_stdout_and_nothing_else(tmp_path):
  """gloo's per-rank connection lines, whole or with pieces of several ranks interleaved,
  are dropped from fd 1; Python prints, a bare number, a partial line and text that only
  resembles gloo's pass in order."""
  script = tmp_path / "s.py"
  script.write_text(
      "import os, sys\n"
      "from rljax import cli\n"
      "cli.drop_gloo_lines()\n"
      "print('step 1', flush=True)\n"
      "os.write(1, b'[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of "
      "connected peer ranks is : 1\\n')\n"
      "os.write(1, b'[Gloo] Rank [Gloo] Rank 0 is connected to ')\n"
      "os.write(1, b'1 peer ranks. Expected number of connected peer ranks is : 1\\n1 is "
      "connected to 1 peer ranks. Expected number of connected peer ranks is : 1\\n')\n"
      "print(42, flush=True)\n"
      "os.write(1, b'[Gloo] is not a rank: kept\\n')\n"
      "sys.stdout.write('\\rprogress 50%'); sys.stdout.flush()\n"
      "print(' done', flush=True)\n")
  out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=ROOT)).stdout.decode()
  assert out == "step 1\n42\n[Gloo] is not a rank: kept\n\rprogress 50% done\n", repr(out)
