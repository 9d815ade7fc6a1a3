"""Mesh, parameter rules, per-process batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from bpd_jax.infra import sharding
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models import drafters


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


# --- Shipped rule sets on the project's models.


def model_params(**fields):
  """The parameters (nnx.State) of a small Transformer whose dimensions
  split over 8 devices (its drafter's rules: `drafter_rules`)."""
  config = TransformerConfig(**{
      **dict(vocab_size=64, d_model=32, d_ff=64, num_heads=8,
             num_encoder_layers=0, num_decoder_layers=2, tie_output=False,
             num_proposal_heads=4, head_hidden=32, dtype='float32',
             param_dtype='float32'), **fields})
  return nnx.split(Transformer(config, rngs=nnx.Rngs(0)))[1]


def drafter_rules(**fields):
  return drafters.tensor_rules(fields.get('head_layer', 'independent'))


def specs(shardings) -> dict:
  """{path name: PartitionSpec} of a tree of shardings."""
  found = {}
  sharding.map_named(lambda name, s: found.setdefault(name, s.spec),
                     shardings)
  return found


def test_tensor_rules_split_the_transformer_megatron_style():
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  lines = []
  found = specs(sharding.param_shardings(
      model_params(num_encoder_layers=1), mesh, 'tensor', lines.append,
      drafter_rules()))
  assert lines == []  # Everything that a rule names splits.
  layer = 'decoder_layers/0/'
  assert found == {**found, **{
      'target_embed/embedding': P('model'),
      'output/kernel': P(None, 'model'),
      layer + 'attention/qkv/kernel': P(None, 'model'),
      layer + 'attention/qkv/bias': P('model'),
      layer + 'attention/out/kernel': P('model'),
      layer + 'attention/out/bias': P(),
      layer + 'cross_attention/query/kernel': P(None, 'model'),
      layer + 'cross_attention/key_value/kernel': P(None, 'model'),
      layer + 'cross_attention/out/kernel': P('model'),
      layer + 'ffn/up/kernel': P(None, 'model'),
      layer + 'ffn/up/bias': P('model'),
      layer + 'ffn/down/kernel': P('model'),
      layer + 'ffn/down/bias': P(),
      layer + 'attention_sublayer/norm/scale': P(),
      'encoder_layers/0/attention/qkv/kernel': P(None, 'model'),
      'heads/w_in': P(None, None, 'model'),  # [heads, d_model, hidden]
      'heads/b_in': P(None, 'model'),
      'heads/w_out': P(None, 'model'),  # [heads, hidden, d_model]
      'heads/b_out': P(),
  }}


@pytest.mark.parametrize('fields,expected', [
    # w_in [d, 3 * hidden], w_out [3 * hidden, 3, d]: by hidden unit (its
    # k - 1 axis never divides 2, 4 or 8 devices for an even k).
    (dict(head_layer='joint'),
     {'heads/w_in': P(None, 'model'), 'heads/w_out': P('model')}),
    (dict(head_layer='sequential'),  # w_in [3, 2 * d, hidden]
     {'heads/w_in': P(None, None, 'model'), 'heads/w_out': P(None, 'model')}),
    (dict(head_layer='autoregressive', num_encoder_layers=1,
          draft_source='own'),
     {'heads/draft/attention/qkv/kernel': P(None, 'model'),
      'heads/draft/attention/out/kernel': P('model'),
      'heads/draft/source_attention/key_value/kernel': P(None, 'model'),
      'heads/draft/up/kernel': P(None, 'model'),
      'heads/draft/down/kernel': P('model'),
      'heads/draft/fuse/kernel': P()}),
    (dict(head_layer='block', num_encoder_layers=1, draft_source='base'),
     {'heads/layers/0/attention/query/kernel': P(None, 'model'),
      'heads/layers/0/attention/key_value/kernel': P(None, 'model'),
      'heads/layers/0/attention/key_value/bias': P('model'),
      'heads/layers/0/attention/out/kernel': P('model'),
      'heads/layers/0/source_attention/query/kernel': P(None, 'model'),
      'heads/layers/0/source_attention/out/kernel': P('model'),
      'heads/layers/0/up/kernel': P(None, 'model'),
      'heads/layers/0/down/kernel': P('model'),
      'heads/fuse/kernel': P(), 'heads/mask': P()}),
    (dict(feed_forward='gated', activation='silu', norm='rms',
          positions='rotary', num_kv_heads=4, tie_output=True),
     {'decoder_layers/1/ffn/gate/kernel': P(None, 'model'),
      'target_embed/embedding': P('model')}),
])
def test_tensor_rules_for_every_head_layer_and_the_llama_pieces(fields,
                                                                expected):
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  lines = []
  found = specs(sharding.param_shardings(model_params(**fields), mesh,
                                         'tensor', lines.append,
                                         drafter_rules(**fields)))
  assert found == {**found, **expected}
  assert lines == []


def test_tensor_rules_replicate_what_does_not_divide_in_one_line():
  mesh = sharding.make_mesh((1, 8), ('data', 'model'))
  lines = []
  params = model_params(vocab_size=60, d_ff=68)
  found = specs(sharding.param_shardings(params, mesh, 'tensor',
                                         lines.append))
  assert found['output/kernel'] == P()
  assert found['decoder_layers/1/ffn/up/kernel'] == P()
  assert found['decoder_layers/1/attention/qkv/kernel'] == P(None, 'model')
  assert lines == [
      "param_rules='tensor' replicates what does not split evenly: "
      "decoder_layers/*/ffn/down/kernel (68 over 8); decoder_layers/*/ffn/"
      "up/bias (68 over 8); decoder_layers/*/ffn/up/kernel (68 over 8); "
      "output/kernel (60 over 8); target_embed/embedding (60 over 8)."]


def test_the_cache_is_split_by_batch_and_key_value_head():
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  model = Transformer(TransformerConfig(
      vocab_size=64, d_model=32, d_ff=64, num_heads=8, num_kv_heads=4,
      num_encoder_layers=1, num_decoder_layers=2, num_proposal_heads=2),
                      rngs=nnx.Rngs(0))
  cache = jax.eval_shape(lambda: model.init_cache(
      2, 10, jnp.zeros((2, 3), jnp.int32)))
  found = specs(sharding.cache_shardings(cache, mesh, 'tensor', 'data'))
  assert found == {'self_attention/0/key': P('data', None, 'model'),
                   'self_attention/0/value': P('data', None, 'model'),
                   'self_attention/1/key': P('data', None, 'model'),
                   'self_attention/1/value': P('data', None, 'model'),
                   'memory/0/key': P('data', None, 'model'),
                   'memory/0/value': P('data', None, 'model'),
                   'memory/1/key': P('data', None, 'model'),
                   'memory/1/value': P('data', None, 'model'),
                   'memory_valid': P('data')}
  batch_only = specs(sharding.cache_shardings(cache, mesh, 'fsdp', 'data'))
  assert set(batch_only.values()) == {P('data')}


def test_fsdp_splits_the_largest_dimension_that_divides():
  mesh = sharding.make_mesh((8, 1), ('data', 'model'))
  params = {'kernel': jnp.zeros((16, 64)), 'wide': jnp.zeros((64, 16)),
            'equal': jnp.zeros((16, 16)), 'odd': jnp.zeros((24, 9)),
            'norm': jnp.zeros(6)}
  lines = []
  found = specs(sharding.param_shardings(params, mesh, 'fsdp', lines.append))
  assert found == {'kernel': P(None, 'data'), 'wide': P('data'),
                   'equal': P('data'), 'odd': P('data'), 'norm': P()}
  assert lines == ["param_rules='fsdp' replicates 1 parameters no dimension "
                   "of which the 8 devices of 'data' divide (e.g. norm)."]


@pytest.mark.parametrize('shape,axes,rules,message', [
    ((8,), ('data',), 'tensor', "splits over a 'model' mesh axis"),
    ((1, 8), ('rows', 'model'), 'fsdp', "splits over a 'data' mesh axis"),
    ((8,), ('data',), 'megatron', "'megatron' is not one of"),
])
def test_rule_set_errors(shape, axes, rules, message):
  with pytest.raises(ValueError, match=message):
    sharding.param_shardings(model_params(), sharding.make_mesh(shape, axes),
                             rules)


def test_ellipsis_specs_name_the_last_dimensions():
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  params = {'a': jnp.zeros((8, 4, 12)), 'b': jnp.zeros(12)}
  found = specs(sharding.param_shardings(
      params, mesh, [('a|b', (..., 'model')), ]))
  assert found == {'a': P(None, None, 'model'), 'b': P('model')}
  with pytest.raises(ValueError, match='more entries than its 1'):
    sharding.param_shardings(params, mesh, [('b', (..., 'data', 'model'))])


def test_a_model_its_state_and_a_dict_name_parameters_alike():
  model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
  def names(tree):
    found = []
    sharding.map_named(lambda name, leaf: found.append(name), tree)
    return sorted(found)
  assert names(model) == names(nnx.split(model)[1]) == names(
      {'kernel': model.kernel[...], 'bias': model.bias[...]}) == [
          'bias', 'kernel']


def test_tensor_rules_hold_an_eighth_of_the_parameters_per_device():
  """Per-device parameter bytes of each rule set on a (1, 8) mesh, for a
  model whose dimensions divide: 'tensor' holds 1/8 of the replicated
  bytes within 10% (norms and the biases added after an all-reduce stay
  whole); 'fsdp' over a (8, 1) mesh too."""
  params = model_params(num_encoder_layers=2, d_model=64, d_ff=256,
                        vocab_size=512)
  whole = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
  per_device = {}
  for shape, rules in (((1, 8), ()), ((1, 8), 'tensor'), ((8, 1), 'fsdp')):
    mesh = sharding.make_mesh(shape, ('data', 'model'))
    placed = jax.device_put(params, sharding.param_shardings(
        params, mesh, rules, model_rules=drafter_rules()))
    held = sharding.device_bytes(placed)
    assert len(held) == 8 and len(set(held.values())) == 1  # Balanced.
    per_device[rules] = max(held.values())
  assert per_device[()] == whole
  assert per_device['tensor'] == pytest.approx(whole / 8, rel=0.1)
  assert per_device['fsdp'] == pytest.approx(whole / 8, rel=0.1)
