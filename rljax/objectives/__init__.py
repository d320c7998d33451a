"""rljax.objectives: advantages, token-advantage transforms, policy losses, aggregation.

Pure jnp functions on arrays named with their shapes; static config (frozen
dataclasses); everything selectable by name is in `rljax.registry`. Formulas
and golden numbers: SPEC §1–5; the list of names: README.md beside this file
(or `catalog()`).

Interface contract (what the train step calls)
----------------------------------------------
Build once from plain names + kwargs (e.g. a ConfigDict converted to dict):
  obj = build_objective(advantage="grpo", transforms=("cort",), loss="grpo",
                        num_generations=8, advantage_kwargs={...},
                        transform_kwargs={"cort": {...}}, loss_kwargs={...},
                        sampler_topk=0, vocab_size=None)
`obj` is a hashable `Objective` (jit static arg). `validate(...)` takes the same
arguments, raises ValueError with a reason, and returns the warnings.

1. Advantages, kind "advantage" (grpo, dr_grpo, rloo):
     fn(rewards_B, group_size, cfg: AdvantageConfig) -> (adv_B, metrics)
   Rows are whole consecutive groups (B % group_size != 0 -> ValueError).
   GRPO scale_rewards in {group, batch, none}, unbiased std, eps 1e-4.
   Groups of equal rewards give exact zeros. `obj.advantages(rewards_B)`.
2. Token-advantage transforms, kind "transform": registered factories
   `make(cfg) -> TokenTransform(init, update)`;
     init() -> state;  update(adv_BxT, batch, state) -> (adv_BxT, state, metrics)
   `chain(*ts)`; stateless transforms use `EmptyState()`. Start from
   `broadcast_advantage(adv_B, mask_BxT)`. `obj.token_transform()` chains the
   configured ones. CoRT's ramp counter k lives in its state (updates so far):
   apply the chain once per rollout batch, on the whole batch, and checkpoint
   its state. CoRT reads batch["logp_plus_BxT"] (rubric prompt, θ̄) and
   batch["logp_minus_BxT"] (rubric-free replay); TIS / MIS / BPO read
   batch["old_logp_BxT"] (p) and batch["sampler_logp_BxT"] (q). All weights are
   stop-gradient. Rejection transforms (`rej*`, tag "rejection") also have
   `keep(batch) -> (keep_BxT, metrics)`: the step removes the tokens they reject from
   the loss, the normalizer and (baseline="kept") the group baseline before `update`.
3. Policy losses, kind "loss":
     loss_fn(pol, batch, cfg: LossConfig) -> (loss, metrics)
   pol (carries gradient): logp_BxT (float32), optional entropy_BxT,
     head_logp_BxTxK (trainer log p at the sampler's recorded head ids).
   batch (no gradient): mask_BxT, adv_B, adv_BxT (after transforms),
     old_logp_BxT, sampler_logp_BxT, optional ref_logp_BxT, head_ids_BxTxK,
     head_logq_BxTxK, normalizer (a `Normalizer` from the whole batch).
   `obj.loss_fn(pol, batch)`. KL (beta, k1/k2/k3) and the entropy bonus
   (entropy_coef) work with every loss.
4. Aggregation, kind "aggregation": token-mean, seq-mean-token-mean,
   seq-mean-token-sum, seq-mean-token-sum-norm; `aggregate(x_BxT, mask_BxT,
   mode, norm)` with `norm = make_normalizer(whole_batch_mask_BxT)`, so the
   losses and gradients of micro-batches sum to the whole batch's.
"""
from rljax.objectives.aggregation import aggregate, make_normalizer, Normalizer
from rljax.objectives.advantages import AdvantageConfig, as_groups
from rljax.objectives.advantages import informative_groups, overlong_penalty
from rljax.objectives.common import broadcast_advantage, Entry
from rljax.objectives.transforms import chain, cort, cort_lambda, cort_weights
from rljax.objectives.transforms import CortConfig, CortState, criterion_deltas
from rljax.objectives.transforms import EmptyState, identity, needs_replay, smoothstep
from rljax.objectives.transforms import stateless, TokenTransform
from rljax.objectives.mismatch import binary_kl, bpo, bpo_weight, BPOConfig
from rljax.objectives.mismatch import importance_weights, ISConfig
from rljax.objectives.rejection import rejection, RejectConfig
from rljax.objectives.advantages import kept_advantages
from rljax.objectives.losses import LossConfig, real_from_scores
from rljax.objectives.score_centering import centering_coefficients
from rljax.objectives.config import build_objective, catalog, Objective, validate

__all__ = [
    "aggregate", "make_normalizer", "Normalizer", "AdvantageConfig", "as_groups",
    "informative_groups", "overlong_penalty", "broadcast_advantage", "Entry",
    "chain", "cort", "cort_lambda", "cort_weights", "CortConfig", "CortState",
    "criterion_deltas", "EmptyState", "identity", "needs_replay", "smoothstep", "stateless",
    "TokenTransform", "binary_kl", "bpo", "bpo_weight", "BPOConfig",
    "importance_weights", "ISConfig", "rejection", "RejectConfig", "kept_advantages", "LossConfig", "real_from_scores",
    "centering_coefficients", "build_objective", "catalog", "Objective", "validate",
]
