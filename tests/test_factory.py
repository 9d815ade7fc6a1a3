"""Config -> model: random and restored models of a config."""

import jax
import numpy as np
import pytest
from flax import nnx

from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.models import factory

from train_configs import tiny_config


def save(model, workdir):
  checkpoints = checkpoints_lib.Checkpoints(str(workdir / 'checkpoints'))
  checkpoints.save(3, dict(params=nnx.state(model, nnx.Param)))
  checkpoints.wait()
  checkpoints.close()


def test_random_model_is_the_configs_seeded_model():
  config = tiny_config()
  model = factory.random_model(config, vocab_size=40)
  assert model.config == factory.model_config_from(config, 40)
  again = factory.random_model(config, vocab_size=40)
  for a, b in zip(jax.tree.leaves(nnx.state(model)),
                  jax.tree.leaves(nnx.state(again))):
    np.testing.assert_array_equal(a, b)


def test_restore_takes_every_parameter_of_the_latest_checkpoint(tmp_path):
  config = tiny_config()
  config.seed = 7  # Not restore's own initialisation (seed 0).
  trained = factory.random_model(config, vocab_size=40)
  save(trained, tmp_path)
  restored = factory.restore_model(config, str(tmp_path), vocab_size=40)
  for a, b in zip(jax.tree.leaves(nnx.state(trained, nnx.Param)),
                  jax.tree.leaves(nnx.state(restored, nnx.Param))):
    np.testing.assert_array_equal(a, b)


def test_another_architecture_is_refused(tmp_path):
  config = tiny_config()
  save(factory.random_model(config, vocab_size=40), tmp_path)
  with pytest.raises(ValueError, match='has shape'):
    factory.restore_model(config, str(tmp_path), vocab_size=41)
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    factory.restore_model(config, str(tmp_path / 'none'), vocab_size=40)
