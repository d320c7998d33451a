"""Bucket workdirs (`gs://`): run files go through rljax.paths (etils.epath -> fsspec), the
same code path as real GCS, here against an in-memory fake of fsspec's "gcs" filesystem;
without the GCS package, a clear refusal."""
import importlib.util
import json

import pytest
from etils.epath import backend as epath_backend

from rljax import paths
from rljax.metrics_log import MetricsWriter, read_metrics
from tests.gcs_fake import FakeGCS


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
  assert out == [f"{wd}/plots/{n}.png" for n in ("cort_panels", "rewards", "mismatch")]
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


@pytest.fixture
def gcs_server(fake_gcs, monkeypatch):
  """The fake bucket also served over GCS's JSON API for tensorstore's gcs driver. Orbax asks
  google-cloud-storage (a gcsfs dependency) whether the bucket has a hierarchical namespace:
  that one query is answered "no" by a stub when the package is absent."""
  import sys
  import types

  from tests import gcs_fake
  log: list = []
  srv = gcs_fake.serve(gcs_fake.Store(fake_gcs), log)
  monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", f"http://127.0.0.1:{srv.server_port}")
  if importlib.util.find_spec("google.cloud.storage") is None:
    bucket = types.SimpleNamespace(hierarchical_namespace_enabled=False)
    storage = types.ModuleType("google.cloud.storage")
    storage.Client = lambda *a, **k: types.SimpleNamespace(get_bucket=lambda name: bucket)
    monkeypatch.setitem(sys.modules, "google.cloud.storage", storage)
    import google.cloud
    monkeypatch.setattr(google.cloud, "storage", storage, raising=False)
  from orbax.checkpoint._src.path import gcs_utils
  gcs_utils.get_bucket.cache_clear()
  yield log
  srv.shutdown()
  gcs_utils.get_bucket.cache_clear()


def test_orbax_checkpoints_on_a_bucket(fake_gcs, gcs_server):
  """RunCheckpointer on gs://: the sharded arrays go through tensorstore's gcs driver (HTTP
  to the fake bucket), the step directories and metadata through epath; async saves, the
  newest `keep`, and a restore into the target's shardings all read back from the bucket."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P

  from rljax.checkpointing import RunCheckpointer
  mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
  state = {"w": jax.device_put(jnp.arange(8.0).reshape(4, 2), NamedSharding(mesh, P("x"))),
           "n": jnp.int32(3)}
  ck = RunCheckpointer("gs://bucket/run/checkpoints", keep=2, best_metric=None)
  for step in (1, 2, 3):
    ck.save(step, jax.tree.map(lambda x, s=step: x + s, state), {"step": step})
  ck.close()
  uploads = [r for r in gcs_server if r.startswith('"POST /upload/storage/v1/b/bucket/o')]
  assert uploads, "no array went through tensorstore's gcs driver"
  files = fake_gcs.find("bucket/run/checkpoints/last")
  assert {p.split("checkpoints/last/")[1].split("/")[0] for p in files} == {"2", "3"}, files
  assert not any("tmp" in p for p in files), files  # keep=2; every save committed
  arrays = [p for p in files if "/3/state/" in p and "ocdbt" in p]
  assert arrays, files  # the arrays' OCDBT files are objects in the bucket
  ck = RunCheckpointer("gs://bucket/run/checkpoints", keep=2, best_metric=None)
  assert ck.latest_step() == 3
  out, meta = ck.restore(state)
  ck.close()
  assert meta["step"] == 3 and int(out["n"]) == 6
  np.testing.assert_array_equal(np.asarray(out["w"]), np.arange(8.0).reshape(4, 2) + 3)
  assert out["w"].sharding == state["w"].sharding


def test_write_text_replaces_whole_file(tmp_path):
  """A concurrent reader never sees a truncated file (the 2-process resume read an empty
  config.json while process 0 rewrote it)."""
  import threading
  from rljax import paths
  f = tmp_path / "config.json"
  texts = ["{" + "x" * 200_000 + "}", "{" + "y" * 100_000 + "}"]
  paths.write_text(f, texts[0])
  seen, stop = set(), threading.Event()

  def read():
    while not stop.is_set():
      seen.add(len(f.read_text()))

  t = threading.Thread(target=read)
  t.start()
  for i in range(200):
    paths.write_text(f, texts[i % 2])
  stop.set()
  t.join()
  assert seen <= {len(x) for x in texts}, sorted(seen)[:5]
  assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temp file left
