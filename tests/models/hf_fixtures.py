"""Tiny random transformers (PyTorch) models of each family, saved with save_pretrained."""
import numpy as np
import torch

FAMILIES = {
    "llama_rope_scaling": dict(
        cls="LlamaForCausalLM", cfg="LlamaConfig", rope_theta=5e5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8}),
    "llama_tied": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", tie_word_embeddings=True),
    # attention_bias puts a bias on q/k/v AND o_proj in Llama; mlp_bias on gate/up/down
    "llama_bias": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", attention_bias=True,
                       mlp_bias=True),
    "qwen2_bias": dict(cls="Qwen2ForCausalLM", cfg="Qwen2Config", tie_word_embeddings=True),
    "qwen3_qk_norm": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config"),
    "qwen3_tied": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config", tie_word_embeddings=True),
}


def make_hf_model(family: str, out_dir: str, seed: int = 0, **over):
  """Random model; every parameter (biases and norms too) drawn at random, then saved."""
  import transformers
  spec = dict(FAMILIES[family])
  cls, cfg_cls = getattr(transformers, spec.pop("cls")), getattr(transformers, spec.pop("cfg"))
  kw = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=128, rms_norm_eps=1e-6)
  kw.update(spec)
  kw.update(over)
  torch.manual_seed(seed)
  model = cls(cfg_cls(**kw)).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight"):
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      elif name.endswith("bias"):
        p.copy_(0.1 * torch.randn_like(p))
      else:
        p.copy_(0.08 * torch.randn_like(p))
  model.save_pretrained(out_dir)
  return model


def left_padded_batch(vocab: int, lengths=(12, 7, 9), seed: int = 0):
  """(ids_BxT, mask_BxT) with rows left-padded to the longest length."""
  rng = np.random.RandomState(seed)
  t = max(lengths)
  ids = rng.randint(0, vocab, (len(lengths), t)).astype(np.int32)
  mask = np.zeros((len(lengths), t), np.int32)
  for i, n in enumerate(lengths):
    mask[i, t - n:] = 1
  return ids, mask


def hf_logits(model, ids, mask, positions):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids, dtype=torch.long),
                 attention_mask=torch.tensor(mask, dtype=torch.long),
                 position_ids=torch.tensor(np.asarray(positions), dtype=torch.long)).logits.numpy()
