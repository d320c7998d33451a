"""The console line: tokens/s, ETA without the compile step, skip count, compile time once;
samples.jsonl."""
import json

from rljax.metrics_log import MetricsWriter


def test_console_line_and_compile_reported_once(tmp_path, capsys):
  w = MetricsWriter(str(tmp_path), tensorboard=False, total_steps=10)
  for step, t in ((1, 50.0), (2, 5.0), (3, 5.0)):
    w.console(step, {"reward/mean": 0.5, "time/step": t, "throughput/tokens_per_s": 1234.4,
                     "actor/num_skipped": 1.0})
  lines = capsys.readouterr().out.strip().split("\n")
  assert len(lines) == 4
  assert "tok/s 1234" in lines[0] and "skipped 1" in lines[0] and "ETA" not in lines[0]
  assert "ETA 40s" in lines[1]  # 8 steps left x 5 s: the first (compiling) step is excluded
  assert lines[2] == "(compile: ~45s, included in the first step's 50s)"
  assert "ETA 35s" in lines[3] and sum("compile" in line for line in lines) == 1
  w.samples(4, [{"prompt": "p", "response": "r", "reward": 1.0}])
  w.close()
  rows = [json.loads(line) for line in open(tmp_path / "samples.jsonl")]
  assert rows == [{"step": 4, "prompt": "p", "response": "r", "reward": 1.0}]
