"""The phases of a run and the optimizer of each."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import factory
from bpd_jax.models import Transformer
from bpd_jax.training import phases

from train_configs import tiny_config


def test_phase_plans():
  config = tiny_config()
  model_config = factory.model_config_from(config, vocab_size=50)
  plan = lambda **fields: [
      (p.name, p.start, p.end, p.heads_only, p.first_head, p.num_heads)
      for p in phases.plan_phases(tiny_config(train=fields).train,
                                  model_config)]
  assert plan(base_steps=12, head_steps=8, freeze_base=True) == [
      ('base', 0, 12, False, 0, 1), ('heads', 12, 20, True, 1, 2)]
  assert plan(base_steps=12, head_steps=8, freeze_base=False) == [
      ('base', 0, 12, False, 0, 1), ('heads', 12, 20, False, 0, 3)]
  # No base phase, nothing frozen: the base trains with its heads from the
  # start, no trained base needed.
  assert plan(base_steps=0, head_steps=8, freeze_base=False) == [
      ('heads', 0, 8, False, 0, 3)]
  assert plan(base_steps=12, head_steps=0) == [('base', 0, 12, False, 0, 1)]


def test_phase_at_and_the_learning_rate_of_its_last_update():
  config = tiny_config(train=dict(base_steps=12, head_steps=8,
                                  schedule='linear', warmup_steps=5))
  model_config = factory.model_config_from(config, vocab_size=50)
  base, heads = phases.plan_phases(config.train, model_config)
  assert [phases.phase_at([base, heads], s).name
          for s in (0, 11, 12, 19, 20)] == ['base'] * 2 + ['heads'] * 3
  peak = config.train.learning_rate
  # Step 5 has made updates 0..4: the last at the peak (warm-up 5).
  np.testing.assert_allclose(phases.learning_rate(config.train, base, 5),
                             peak, rtol=1e-6)
  # The heads phase counts its own updates from 0.
  np.testing.assert_allclose(phases.learning_rate(config.train, heads, 13),
                             peak / 5, rtol=1e-6)


def flat(params, heads):
  """{path: array} of the heads' (True) or the base's (False) leaves."""
  return {jax.tree_util.keystr(path): np.asarray(value)
          for path, value in jax.tree_util.tree_leaves_with_path(params)
          if ("'heads'" in jax.tree_util.keystr(path)) == heads}


@pytest.mark.parametrize('freeze_base', [False, True])
def test_a_fine_tuned_base_moves_at_its_scaled_rate(freeze_base):
  config = tiny_config(train=dict(base_steps=6, head_steps=4,
                                  freeze_base=freeze_base, clip_norm=0.0,
                                  base_learning_rate_scale=0.25))
  model = Transformer(factory.model_config_from(config, 64),
                      rngs=nnx.Rngs(0))
  _, heads_phase = phases.plan_phases(config.train, model.config)
  params = nnx.state(model, nnx.Param)
  trainable = nnx.split_state(params, heads_phase.trainable, ...)[0]
  tx = phases.optimizer(config.train, heads_phase)
  grads = jax.tree.map(jnp.ones_like, trainable)
  updates, _ = tx.update(grads, tx.init(trainable), trainable)
  # Adam's first step is -lr(0) * sign(g): the base at a quarter of it
  # when fine-tuned; a frozen base is not trained at all.
  lr = config.train.learning_rate / config.train.warmup_steps
  moved = flat(updates, heads=False)
  assert bool(moved) != freeze_base
  for name, value in moved.items():
    np.testing.assert_allclose(value, -0.25 * lr, rtol=1e-5, err_msg=name)
  for name, value in flat(updates, heads=True).items():
    np.testing.assert_allclose(value, -lr, rtol=1e-5, err_msg=name)
