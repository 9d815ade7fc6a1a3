"""Orbax checkpoints: round trip, keep N, params of another run."""

import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax import checkpoints


def state(value):
  return {'step': jnp.asarray(value), 'params': {'w': jnp.full((2, 3), value,
                                                               jnp.float32)}}


def test_round_trip_and_keep_newest(tmp_path):
  store = checkpoints.Checkpoints(str(tmp_path), max_to_keep=2)
  for step in (1, 2, 3):
    store.save(step, state(step))
  store.wait()
  assert store.latest_step() == 3
  assert sorted(int(p.name) for p in tmp_path.iterdir()
                if p.name.isdigit()) == [2, 3]
  restored = store.restore(3, checkpoints.abstract_like(state(0)))
  np.testing.assert_array_equal(restored['params']['w'], 3.0)
  store.close()


def test_params_dict_needs_a_checkpoint(tmp_path):
  with pytest.raises(FileNotFoundError, match='no checkpoint in'):
    checkpoints.restore_params_dict(str(tmp_path))
  store = checkpoints.Checkpoints(str(tmp_path))
  store.save(5, state(5))
  store.wait()
  store.close()
  params = checkpoints.restore_params_dict(str(tmp_path))
  np.testing.assert_array_equal(params['w'], np.full((2, 3), 5.0))


def test_keep_must_be_positive(tmp_path):
  with pytest.raises(ValueError, match='max_to_keep=0'):
    checkpoints.Checkpoints(str(tmp_path), max_to_keep=0)
