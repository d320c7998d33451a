"""rljax's GGUF reader against the `gguf` package's GGUFReader: the same metadata values and
tensor bytes for the bundled SmolLM2 file and for a file of every metadata type."""
import os
import time

import gguf
import numpy as np
import pytest

from rljax.models.files import BadModelFile
from rljax.models.gguf_file import open_gguf, read_gguf


def _assert_same_as_gguf_reader(path):
  ours, ref = read_gguf(path), gguf.GGUFReader(path)
  fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}  # its own
  assert list(ours.fields) == list(fields)
  for key, field in fields.items():
    want, got = field.contents(), ours.fields[key]
    assert got == want and type(got) is type(want), key
  assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
  for a, b in zip(ours.tensors, ref.tensors):
    assert a.tensor_type == b.tensor_type and a.shape == tuple(b.shape.tolist()), a.name
    assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
    np.testing.assert_array_equal(a.data, b.data)
  return ours


def test_bundled_smollm2_reads_as_gguf_reader_reads_it():
  from rljax.models.bundled import smollm2_path
  f = _assert_same_as_gguf_reader(smollm2_path())
  assert len(f.fields["tokenizer.ggml.tokens"]) == 49152
  assert {t.tensor_type.name for t in f.tensors} == {"F32", "Q4_1", "Q8_0"}


def _write_every_type(path, alignment=64):
  w = gguf.GGUFWriter(path, "llama")
  w.add_custom_alignment(alignment)
  for i, vt in enumerate([gguf.GGUFValueType.UINT8, gguf.GGUFValueType.INT8,
                          gguf.GGUFValueType.UINT16, gguf.GGUFValueType.INT16,
                          gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32,
                          gguf.GGUFValueType.UINT64, gguf.GGUFValueType.INT64]):
    w.add_key_value(f"t.int{i}", 7 + i, vt)
  w.add_key_value("t.f32", 0.25, gguf.GGUFValueType.FLOAT32)
  w.add_key_value("t.f64", 1e-300, gguf.GGUFValueType.FLOAT64)
  w.add_key_value("t.bool", True, gguf.GGUFValueType.BOOL)
  w.add_key_value("t.str", "héllo ▁wörld", gguf.GGUFValueType.STRING)
  w.add_array("t.ints", [3, -1, 2])
  w.add_array("t.floats", [0.5, -2.0])
  w.add_array("t.strs", ["a", "", "Ġthe", "<|im_end|>"])
  rng = np.random.default_rng(0)
  w.add_tensor("a.f32", rng.standard_normal((3, 5)).astype(np.float32))
  w.add_tensor("b.f16", rng.standard_normal((2, 4, 6)).astype(np.float16))
  q = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32),
                           gguf.GGMLQuantizationType.Q8_0)
  w.add_tensor("c.q8", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
  w.add_tensor("d.i32", np.arange(7, dtype=np.int32))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()


@pytest.mark.parametrize("alignment", [32, 64])
def test_every_value_type_and_tensor_type_reads_as_gguf_reader_reads_it(tmp_path, alignment):
  p = str(tmp_path / "all.gguf")
  _write_every_type(p, alignment)
  f = _assert_same_as_gguf_reader(p)
  assert f.fields["t.strs"] == ["a", "", "Ġthe", "<|im_end|>"]
  q = next(t for t in f.tensors if t.name == "c.q8")
  assert np.abs(gguf.quants.dequantize(q.data, q.tensor_type).reshape(4, 64)).max() > 0


def test_every_truncation_names_the_file(tmp_path):
  src = str(tmp_path / "all.gguf")
  _write_every_type(src)
  raw = open(src, "rb").read()
  end = raw.rindex(np.arange(7, dtype=np.int32).tobytes()) + 28  # the last tensor's end
  p = str(tmp_path / "cut.gguf")
  for n in range(end):  # every cut short of the data (after it comes alignment padding)
    with open(p, "wb") as f:
      f.write(raw[:n])
    with pytest.raises(BadModelFile, match=f"^{p}"):
      read_gguf(p)


def test_a_rewritten_file_is_read_again(tmp_path):
  p = str(tmp_path / "m.gguf")
  _write_every_type(p)
  first = open_gguf(p)
  assert open_gguf(p) is first  # unchanged: the same parsed file
  w = gguf.GGUFWriter(p, "qwen3")
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.close()
  os.utime(p, ns=(time.time_ns(), time.time_ns() + 10**9))
  again = open_gguf(p)
  assert again.fields["general.architecture"] == "qwen3" and again.tensors == ()
