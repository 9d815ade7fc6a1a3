"""The optimizer: Adam with linear warm-up, then the paper's rsqrt decay or
a linear decay to zero at the end of the phase.

The rsqrt schedule (Vaswani et al. 2017; Stern et al. 2018) suits long runs
of unknown length. A short run of known length ends better with the rate
decayed linearly to zero over it (measured on the demo in configs/demo.py).
"""

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


SCHEDULES = ('rsqrt', 'linear')


def linear_schedule(peak_learning_rate: float, warmup_steps: int,
                    total_steps: int):
  """Linear warm-up to the peak at `warmup_steps`, then linear decay over the
  remaining updates of `total_steps` (counted from 1 as in `rsqrt_schedule`),
  reaching 0 one update after the last. A phase no longer than its warm-up
  ends during it, as with the rsqrt schedule.
  """
  if warmup_steps < 1:
    raise ValueError(f'warmup_steps={warmup_steps} must be >= 1.')
  return optax.join_schedules(
      [optax.linear_schedule(peak_learning_rate / warmup_steps,
                             peak_learning_rate, warmup_steps - 1),
       optax.linear_schedule(peak_learning_rate, 0.0,
                             max(total_steps - warmup_steps + 1, 1))],
      [warmup_steps - 1])


def schedule(train_config, updates: int):
  """The learning rate by update count, for a phase of `updates` updates.

  Args:
    train_config: the config's `train` section: schedule ('rsqrt' or
      'linear'; absent: 'rsqrt'), learning_rate, warmup_steps.
    updates: optimizer updates in the phase (the linear decay ends there).
  """
  name = getattr(train_config, 'schedule', 'rsqrt')
  if name == 'rsqrt':
    return rsqrt_schedule(train_config.learning_rate,
                          train_config.warmup_steps)
  if name == 'linear':
    return linear_schedule(train_config.learning_rate,
                           train_config.warmup_steps, updates)
  raise ValueError(f'train.schedule={name!r} is not one of {SCHEDULES}.')


def make_optimizer(train_config, updates: int = 0, slow_mask=None,
                   slow_scale: float = 1.0) -> optax.GradientTransformation:
  """Adam (beta2 0.98, eps 1e-9 as in the paper), clipping, accumulation.

  Args:
    train_config: the config's `train` section: schedule, learning_rate,
      warmup_steps, clip_norm (0: none), grad_accum_steps.
    updates: optimizer updates the schedule spans (see `schedule`).
    slow_mask: params -> a tree of bools like them (optax.masked's mask):
      the parameters whose updates are scaled by `slow_scale`, e.g. a
      trained base fine-tuned beside new heads.
    slow_scale: the factor on those parameters' learning rate; at 1.0 no
      transform is added, so the optimizer state keeps its layout.
  """
  schedule_fn = schedule(train_config, updates)
  parts = []
  if train_config.clip_norm > 0:
    parts.append(optax.clip_by_global_norm(train_config.clip_norm))
  parts.append(optax.adam(schedule_fn, b1=0.9, b2=0.98, eps=1e-9))
  if slow_scale != 1.0:
    if slow_mask is None:
      raise ValueError(f'slow_scale={slow_scale} needs a slow_mask.')
    parts.append(optax.masked(optax.scale(slow_scale), slow_mask))
  tx = optax.chain(*parts)
  if train_config.grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=train_config.grad_accum_steps)
  return tx
