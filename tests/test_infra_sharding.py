"""Mesh, parameter rules, per-process batches."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from bpd_jax.infra import sharding


def test_make_mesh_fills_minus_one_and_takes_subsets():
  assert sharding.make_mesh((-1,), ('data',)).shape == {'data': 8}
  assert sharding.make_mesh((2, -1), ('data', 'model')).shape == {
      'data': 2, 'model': 4}
  assert sharding.make_mesh((1,), ('data',)).devices.size == 1


@pytest.mark.parametrize('shape,axes,message', [
    ((16,), ('data',), 'needs 16 devices; there are 8'),
    ((-1, -1), ('a', 'b'), 'more than one -1'),
    ((3, -1), ('a', 'b'), 'do not divide'),
    ((2,), ('a', 'b'), 'differ in length'),
])
def test_make_mesh_errors(shape, axes, message):
  with pytest.raises(ValueError, match=message):
    sharding.make_mesh(shape, axes)


def test_param_rules():
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  params = {'ffn': {'up': {'kernel': jnp.zeros((8, 16))}},
            'norm': {'scale': jnp.zeros(6)}}
  shardings = sharding.param_shardings(
      params, mesh, [('ffn/up/kernel', (None, 'model'))])
  assert shardings['ffn']['up']['kernel'].spec == P(None, 'model')
  assert shardings['norm']['scale'].spec == P()


@pytest.mark.parametrize('rule,message', [
    (('.*kernel', (None, 'tensor')), "names mesh axis 'tensor'"),
    (('norm/scale', ('model',)), 'dimension 6 does not split over the 4'),
    (('.*kernel', (None, None, 'model')), 'more entries than its 2'),
])
def test_param_rule_errors(rule, message):
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  params = {'ffn': {'up': {'kernel': jnp.zeros((8, 16))}},
            'norm': {'scale': jnp.zeros(6)}}
  with pytest.raises(ValueError, match=message):
    sharding.param_shardings(params, mesh, [rule])


def test_global_batch_is_sharded_over_the_data_axis():
  mesh = sharding.make_mesh((-1,), ('data',))
  batch = sharding.global_batch({'x': np.arange(16).reshape(8, 2)},
                                sharding.batch_sharding(mesh, 'data'))
  assert batch['x'].shape == (8, 2)
  assert len(batch['x'].sharding.device_set) == 8
  with pytest.raises(ValueError, match="data axis 'rows' is not a mesh axis"):
    sharding.batch_sharding(mesh, 'rows')
