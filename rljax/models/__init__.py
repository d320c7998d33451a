"""Decoder models: construction, sharded creation and checkpoint loading.

    model = load_model("path/to/hf_dir_or.gguf", mesh=mesh)   # params land in their shardings
    hidden_BxTxD, _ = model(tokens_BxT, positions_BxT, mask_BxT)
"""
from __future__ import annotations

from flax import nnx

from rljax import sharding as shd
from rljax.models.checkpoint import export_safetensors, load_params, open_checkpoint
from rljax.models.config import ModelConfig, config_from_hf_dict, load_hf_config
from rljax.models.decoder import Decoder, KVCache, init_cache, positions_from_mask

__all__ = ["ModelConfig", "Decoder", "KVCache", "init_cache", "positions_from_mask",
           "create_model", "load_model", "export_model", "model_shardings", "params_dict",
           "load_hf_config", "config_from_hf_dict"]


def _abstract(cfg: ModelConfig, remat: bool | str):
  return nnx.eval_shape(lambda: Decoder(cfg, nnx.Rngs(0), remat=remat))


def model_shardings(cfg: ModelConfig, mesh, remat: bool | str = False) -> dict:
  """NamedShardings (pure dict) of every parameter, from shapes only."""
  _, state = nnx.split(_abstract(cfg, remat))
  return shd.param_shardings(nnx.to_pure_dict(state), mesh)


def create_model(cfg: ModelConfig, mesh=None, seed: int = 0,
                 remat: bool | str = False) -> Decoder:
  """Random init; with a mesh, each parameter is created directly in its sharding."""
  import jax
  if mesh is None:
    return Decoder(cfg, nnx.Rngs(seed), remat=remat)
  abstract = _abstract(cfg, remat)
  graphdef, abs_state = nnx.split(abstract)
  shardings = shd.param_shardings(nnx.to_pure_dict(abs_state), mesh)
  out_sh = jax.tree.map(lambda _, s: s, nnx.to_pure_dict(abs_state), shardings)

  @jax.jit
  def init():
    return nnx.to_pure_dict(nnx.state(Decoder(cfg, nnx.Rngs(seed), remat=remat)))

  pure = jax.jit(init, out_shardings=out_sh)()
  nnx.replace_by_pure_dict(abs_state, pure)
  return nnx.merge(graphdef, abs_state)


def load_model(path: str, mesh=None, remat: bool | str = False, **overrides) -> Decoder:
  """Loads a HF safetensors directory or a GGUF file; `overrides` edit the ModelConfig
  (e.g. param_dtype="bfloat16")."""
  cfg, source = open_checkpoint(path, **overrides)
  graphdef, abs_state = nnx.split(_abstract(cfg, remat))
  shardings = model_shardings(cfg, mesh, remat) if mesh is not None else None
  pure = load_params(source, cfg, shardings)
  nnx.replace_by_pure_dict(abs_state, pure)
  return nnx.merge(graphdef, abs_state)


def params_dict(model: Decoder) -> dict:
  """The parameters as a pure nested dict of arrays."""
  return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def export_model(model: Decoder, out_dir: str) -> str:
  """Safetensors + config.json that `transformers.AutoModelForCausalLM` loads."""
  return export_safetensors(params_dict(model), model.cfg, out_dir)
