"""The learning-rate schedule and the optimizer chain."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from bpd_jax.training import optim


def test_rsqrt_schedule():
  schedule = optim.rsqrt_schedule(1e-3, 100)
  np.testing.assert_allclose(schedule(0), 1e-5, rtol=1e-5)  # Step 1 of 100.
  np.testing.assert_allclose(schedule(99), 1e-3, rtol=1e-5)  # The peak.
  np.testing.assert_allclose(schedule(399), 5e-4, rtol=1e-5)  # sqrt(100/400).
  with pytest.raises(ValueError, match='warmup_steps=0'):
    optim.rsqrt_schedule(1e-3, 0)


def test_linear_schedule_warms_up_then_reaches_zero_after_the_last_update():
  schedule = optim.linear_schedule(1e-3, 100, 400)
  np.testing.assert_allclose(schedule(0), 1e-5, rtol=1e-5)  # As rsqrt's.
  np.testing.assert_allclose(schedule(49), 5e-4, rtol=1e-5)
  np.testing.assert_allclose(schedule(99), 1e-3, rtol=1e-5)  # The peak.
  np.testing.assert_allclose(schedule(249), 1e-3 * 151 / 301, rtol=1e-5)
  np.testing.assert_allclose(schedule(399), 1e-3 / 301, rtol=1e-5)  # Last.
  np.testing.assert_allclose(schedule(400), 0.0, atol=1e-12)
  # A phase shorter than the warm-up ends in it, as rsqrt's would.
  short = optim.linear_schedule(1e-3, 100, 10)
  np.testing.assert_allclose(short(9), 1e-4, rtol=1e-5)
  with pytest.raises(ValueError, match='warmup_steps=0'):
    optim.linear_schedule(1e-3, 0, 400)


def test_schedule_by_name_and_its_limits():
  train = config(learning_rate=1e-3, warmup_steps=100)
  np.testing.assert_allclose(optim.schedule(train, 400)(399), 5e-4,
                             rtol=1e-5)  # rsqrt: no end.
  train.schedule = 'linear'
  np.testing.assert_allclose(optim.schedule(train, 400)(399), 1e-3 / 301,
                             rtol=1e-5)
  train.schedule = 'cosine'
  with pytest.raises(ValueError, match="train.schedule='cosine'"):
    optim.schedule(train, 400)


def config(**overrides):
  return ml_collections.ConfigDict({**dict(
      learning_rate=0.1, warmup_steps=1, clip_norm=1.0, grad_accum_steps=1),
      **overrides})


def test_clipping_bounds_the_first_update():
  tx = optim.make_optimizer(config())
  params = {'w': jnp.zeros(3)}
  updates, _ = tx.update({'w': jnp.array([300.0, 400.0, 0.0])},
                         tx.init(params), params)
  # Adam's first step is lr * sign(g) whatever the scale; clipping must not
  # break that, and the zero gradient stays zero.
  np.testing.assert_allclose(updates['w'], [-0.1, -0.1, 0.0], atol=1e-6)


def test_gradient_accumulation_updates_every_k_steps():
  tx = optim.make_optimizer(config(grad_accum_steps=3))
  params = {'w': jnp.zeros(2)}
  state = tx.init(params)
  moved = []
  for _ in range(6):
    updates, state = tx.update({'w': jnp.ones(2)}, state, params)
    params = optax.apply_updates(params, updates)
    moved.append(bool(jnp.any(updates['w'] != 0)))
  assert moved == [False, False, True, False, False, True]


def test_slow_parameters_move_at_the_scaled_rate():
  params = {'base': jnp.zeros(2), 'heads': jnp.zeros(2)}
  grads = {'base': jnp.array([1.0, -2.0]), 'heads': jnp.array([3.0, -1.0])}
  tx = optim.make_optimizer(
      config(clip_norm=0.0), slow_scale=0.25,
      slow_mask=lambda p: {'base': True, 'heads': False})
  updates, _ = tx.update(grads, tx.init(params), params)
  # Adam's first step is lr * sign(g): a quarter of it on the base.
  np.testing.assert_allclose(updates['base'], [-0.025, 0.025], atol=1e-6)
  np.testing.assert_allclose(updates['heads'], [-0.1, 0.1], atol=1e-6)
  with pytest.raises(ValueError, match='slow_scale=0.25 needs a slow_mask'):
    optim.make_optimizer(config(), slow_scale=0.25)


def test_an_unscaled_optimizer_keeps_its_state_layout():
  params = {'w': jnp.zeros(2)}
  plain = optim.make_optimizer(config())
  unscaled = optim.make_optimizer(config(), slow_mask=lambda p: {'w': True})
  assert (jax.tree.structure(plain.init(params))
          == jax.tree.structure(unscaled.init(params)))
