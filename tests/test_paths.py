"""Bucket workdirs (`gs://`): run files go through rljax.paths (etils.epath -> fsspec), the
same code path as real GCS, here against an in-memory fake of fsspec's "gcs" filesystem;
without the GCS package, a clear refusal."""
import importlib.util
import json

import pytest
from etils.epath import backend as epath_backend
from fsspec.implementations.memory import MemoryFileSystem

from rljax import paths
from rljax.metrics_log import MetricsWriter, read_metrics


class FakeGCS(MemoryFileSystem):
  """What gcsfs answers for `gs://bucket/...`, kept in memory (its own store)."""
  protocol = ("gs", "gcs")
  store: dict = {}
  pseudo_dirs = [""]

  def __init__(self, *args, finalize_on_close=True, **kwargs):
    super().__init__(*args, **kwargs)

  @classmethod
  def _strip_protocol(cls, path):
    path = str(path)
    for prefix in ("gs://", "gcs://"):
      if path.startswith(prefix):
        path = path[len(prefix):]
    return MemoryFileSystem._strip_protocol(path)


@pytest.fixture
def fake_gcs(monkeypatch):
  FakeGCS.store.clear()
  FakeGCS.pseudo_dirs[:] = [""]
  from fsspec.registry import _registry  # what fsspec.register_implementation fills
  for name in ("gs", "gcs"):
    monkeypatch.setitem(_registry, name, FakeGCS)
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  yield FakeGCS()
  epath_backend.fsspec_backend._get_filesystem.cache_clear()


def test_missing_gcs_package_is_refused_clearly():
  if importlib.util.find_spec("gcsfs") is not None:
    pytest.skip("gcsfs is installed here: nothing to refuse")
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  with pytest.raises(ImportError, match=r"gs://bucket/run: writing to gs:// needs the `gcsfs`"):
    paths.check_writable("gs://bucket/run")
  with pytest.raises(ImportError, match="gcsfs"):
    MetricsWriter("gs://bucket/run", tensorboard=False)
  with pytest.raises(ValueError, match="unsupported scheme ftp://"):
    paths.check_writable("ftp://host/run")
  paths.check_writable("/local/dir")  # local paths need nothing


def test_metrics_config_tensorboard_and_plots_on_a_bucket(fake_gcs):
  wd = "gs://bucket/runs/a"
  paths.write_text(f"{wd}/config.json", json.dumps({"seed": 0}))
  log = MetricsWriter(wd, tensorboard=True, total_steps=3)
  log.write(1, {"reward/mean": 0.5, "loss": 1.0, "text": "skipped"})
  log.write(2, {"reward/mean": 0.75, "loss": 0.5})
  log.close()
  # a resumed run appends after what is there (objects are rewritten whole)
  log = MetricsWriter(wd, tensorboard=False)
  log.write(2, {"reward/mean": 0.8})
  log.write(3, {"reward/mean": 0.9})
  log.close()
  raw = fake_gcs.cat_file("bucket/runs/a/metrics.jsonl").decode().splitlines()
  assert [json.loads(x)["step"] for x in raw] == [1, 2, 2, 3]
  assert [r["reward/mean"] for r in read_metrics(wd)] == [0.5, 0.8, 0.9]
  assert json.loads(fake_gcs.cat_file("bucket/runs/a/config.json")) == {"seed": 0}
  events = [p for p in fake_gcs.find("bucket/runs/a/tb") if "tfevents" in p]
  assert events and fake_gcs.size(events[0]) > 0
  from rljax.plot import plot_runs
  out = plot_runs([wd], f"{wd}/plots")
  assert out == [f"{wd}/plots/cort_panels.png", f"{wd}/plots/rewards.png"]
  for p in out:
    assert fake_gcs.cat_file(p[len("gs://"):])[:8] == b"\x89PNG\r\n\x1a\n"


def test_inactive_writer_writes_nothing(fake_gcs):
  log = MetricsWriter("gs://bucket/runs/b", tensorboard=True, active=False)
  log.write(1, {"loss": 1.0})
  log.console(1, {"loss": 1.0})
  log.close()
  assert not fake_gcs.exists("bucket/runs/b")


def test_local_cache_dir_for_bucket_runs(tmp_path, monkeypatch):
  monkeypatch.setenv("RLJAX_CACHE", str(tmp_path))
  assert paths.local_cache_dir("tfds") == str(tmp_path / "tfds")
  assert (tmp_path / "tfds").is_dir()
  assert paths.is_remote("gs://b/x") and not paths.is_remote("/b/x")
