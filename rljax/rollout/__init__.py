"""Rollout engine: a jitted batched sampler that records its true distribution, and rollout
copies of the trainer that differ from it on purpose (the mismatch simulator).

Contract with the trainer (SPEC §5: TIS / MIS / SC / BPO need the sampler's true q):

    cfg = SamplerConfig(max_new_tokens=256, temperature=1.0, top_p=0.95,
                        num_generations=8, record_topk=32)
    sync = SamplerSync(RolloutCopy.parse("w8a8+kv4"), every=4)    # or "none", every=1
    sampler = sync.params(step, trainer_model)                    # (graphdef, state)
    r = generate(sampler, prompt_ids_BxP, prompt_mask_BxP, key, cfg, mesh=mesh)
    ids_BxT, mask_BxT = sequences(r)                              # prompt + response
    metrics = mismatch_metrics(r.logq_BxN, trainer_logp_BxN, r.mask_BxN)

- Prompts are left-padded [B, P] with a 0/1 mask. `generate` prefills each prompt once and
  copies its KV cache to its G = `num_generations` rows: the Rollout has B·G rows, row i·G + g is sample g of
  prompt i, so every group of G consecutive rows is one prompt's group (what the
  advantages need). `prompt_ids_BxP` / `prompt_mask_BxP` in the Rollout are repeated too.
- `tokens_BxN`, `mask_BxN` (1 on generated tokens up to and including the stop token),
  `truncated_B` (no stop token within max_new_tokens), `logq_BxN` (float32 log q of each
  sampled token under the distribution it was drawn from: `rljax.logprobs.sampling_logits`
  = temperature, then top-k, then top-p, renormalized; equal to `token_logprobs` of the
  same tokens under the same settings), and with `record_topk` the head of that
  distribution: `topk_ids_BxNxK`, `topk_logq_BxNxK` (sorted; -inf outside a truncated
  support; the whole vocabulary with record_topk=-1 / "full").
- Greedy is `temperature=0`: argmax tokens, logq = 0 (a point mass; the head is
  [0, -inf, ...] over the top-k logits).
- Keys: one PRNG key (split into one per prompt) or one per prompt. Same key, same
  output, whatever else is in the batch and however much left padding a row has.
- `mesh`: parameters in their rule shardings (moved there if they are not), batch and
  KV cache over (data, fsdp), kv heads over tensor.
- Rollout copies (`RolloutCopy`, `make_sampler_params`): none (the trainer's own
  arrays), bf16, int8 / int4 weight-only (per output channel, optional groups), w8a8
  (+ per-token int8 activations), kv8 / kv4 (per token, per head), noise<σ>; rebuilt at
  every sync. `SamplerSync(copy, every=N)`: sampler lags the trainer by 0..N-1 updates;
  `state_dict()` / `load_state_dict()` checkpoint it.
- `score_rollout(model, r, cfg)`: the trainer's logprobs of the sampled tokens (reference).
"""
from rljax.rollout.config import SamplerConfig
from rljax.rollout.copies import RolloutCopy, SamplerSync, make_sampler_params
from rljax.rollout.metrics import mismatch_metrics
from rljax.rollout.quant import QuantNumerics, fake_quant, fake_quant_weight
from rljax.rollout.sampler import Rollout, generate, prompt_keys, sequences
from rljax.rollout.scoring import score_rollout

__all__ = ["SamplerConfig", "Rollout", "generate", "sequences", "prompt_keys",
           "RolloutCopy", "SamplerSync", "make_sampler_params", "QuantNumerics",
           "fake_quant", "fake_quant_weight", "mismatch_metrics", "score_rollout"]
