"""The console line: tokens/s, the measured compile time, an ETA without it, skip count;
samples.jsonl."""
import json

import jax
import jax.numpy as jnp

from rljax.metrics_log import CompileClock, MetricsWriter


def test_console_line_shows_measured_compile_and_leaves_it_out_of_the_eta(tmp_path, capsys):
  w = MetricsWriter(str(tmp_path), tensorboard=False, total_steps=10)
  # step 1 compiles for 45 of its 50 s; step 3 recompiles (a new prompt bucket) for 3 s
  for step, t, c in ((1, 50.0, 45.0), (2, 5.0, 0.01), (3, 5.0, 3.0)):
    w.console(step, {"reward/mean": 0.5, "time/step": t, "time/compile": c,
                     "throughput/tokens_per_s": 1234.4, "actor/num_skipped": 1.0})
  lines = capsys.readouterr().out.strip().split("\n")
  assert len(lines) == 3
  assert "tok/s 1234" in lines[0] and "skipped 1" in lines[0]
  assert "compile 45s" in lines[0] and "ETA 45s" in lines[0]  # 9 steps left x (50 - 45) s
  assert "compile" not in lines[1] and "ETA 40s" in lines[1]  # 8 x 5 s
  assert "compile 3s" in lines[2] and "ETA 28s" in lines[2]  # 7 x mean(5, 5, 2) s
  w.samples(4, [{"prompt": "p", "response": "r", "reward": 1.0}])
  w.close()
  rows = [json.loads(line) for line in open(tmp_path / "samples.jsonl")]
  assert rows == [{"step": 4, "prompt": "p", "response": "r", "reward": 1.0}]


def test_compile_clock_measures_a_compile_and_not_a_cached_call():
  clock = CompileClock()
  f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
  x = jnp.ones((64, 64))
  f(x).block_until_ready()
  first = clock.lap()
  f(x).block_until_ready()
  assert first > 0 and clock.lap() < first / 10


def _tb_events(tb_dir):
  """Every Event in the TensorBoard files of `tb_dir` (TFRecord framing read by hand)."""
  import glob
  import struct
  from tensorboardX.proto import event_pb2
  events = []
  for path in sorted(glob.glob(f"{tb_dir}/events.out.tfevents.*")):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
      (n,) = struct.unpack("<Q", data[i:i + 8])
      ev = event_pb2.Event()
      ev.ParseFromString(data[i + 12:i + 12 + n])
      events.append(ev)
      i += 12 + n + 4
  return events


def test_samples_reach_tensorboard_text(tmp_path):
  """Each eval's samples are also a TensorBoard text summary at that step."""
  w = MetricsWriter(str(tmp_path), tensorboard=True, total_steps=8)
  w.write(4, {"reward/mean": 0.25})
  w.samples(4, [{"prompt": "Name a fruit.", "response": "apple", "reward": 1.0}])
  w.close()
  texts = [(ev.step, v.tag, v.tensor.string_val[0].decode())
           for ev in _tb_events(tmp_path / "tb") for v in ev.summary.value
           if v.tensor.string_val]
  assert len(texts) == 1
  step, tag, md = texts[0]
  assert step == 4 and tag.startswith("samples")
  assert "Name a fruit." in md and "apple" in md and "1.0" in md
  scalars = [(ev.step, v.tag, v.simple_value) for ev in _tb_events(tmp_path / "tb")
             for v in ev.summary.value if v.tag == "reward/mean"]
  assert scalars == [(4, "reward/mean", 0.25)]
