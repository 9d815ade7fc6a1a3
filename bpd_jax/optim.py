"""The paper's optimizer: Adam with linear warm-up and rsqrt decay."""

import jax.numpy as jnp
import optax


def rsqrt_schedule(peak_learning_rate: float, warmup_steps: int):
  """Linear warm-up to the peak at `warmup_steps`, then 1/sqrt(step) decay.

  The Transformer schedule (Vaswani et al. 2017) with the peak made explicit:
  lr(s) = peak * min(s / w, sqrt(w / s)) for s counted from 1.
  """
  if warmup_steps < 1:
    raise ValueError(f'warmup_steps={warmup_steps} must be >= 1.')

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    return peak_learning_rate * jnp.minimum(step / warmup_steps,
                                            jnp.sqrt(warmup_steps / step))
  return schedule


def make_optimizer(train_config) -> optax.GradientTransformation:
  """Adam (beta2 0.98, eps 1e-9 as in the paper), clipping, accumulation.

  Args:
    train_config: the config's `train` section: learning_rate,
      warmup_steps, clip_norm (0: none), grad_accum_steps.
  """
  schedule = rsqrt_schedule(train_config.learning_rate,
                            train_config.warmup_steps)
  parts = []
  if train_config.clip_norm > 0:
    parts.append(optax.clip_by_global_norm(train_config.clip_norm))
  parts.append(optax.adam(schedule, b1=0.9, b2=0.98, eps=1e-9))
  tx = optax.chain(*parts)
  if train_config.grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=train_config.grad_accum_steps)
  return tx
