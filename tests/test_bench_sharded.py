"""The bench on a mesh: its timed Decoder's placement, and each rule set's
row of per-device memory and collectives (8 simulated CPU devices)."""

import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from bpd_jax.bench import report
from bpd_jax.bench import sharded
from bpd_jax.infra import errors
from bpd_jax.models import Transformer, TransformerConfig
from train_configs import tiny_config


def small_model():
  """A decoder-only Transformer whose heads (8), hidden units and
  vocabulary split over 4 devices."""
  return Transformer(TransformerConfig(
      vocab_size=64, d_model=32, d_ff=64, num_heads=8, num_encoder_layers=0,
      num_decoder_layers=2, tie_output=False, num_proposal_heads=4,
      head_hidden=32, max_target_len=64), rngs=nnx.Rngs(0))


def mesh_config(shape=(2, 4), axes=('data', 'model'), rules=()):
  return tiny_config(mesh=dict(shape=shape, axes=axes, param_rules=rules))


@pytest.mark.slow  # The parts' own tests run by default.
def test_a_row_per_rule_set_with_memory_and_collectives():
  model = small_model()
  inputs = np.full((3, 5), 7, np.int32)  # 3 rows: repeated up to 4.
  rows = sharded.table(model, mesh_config(), inputs, max_len=8, k=4,
                       log=lambda _: None)
  assert [row['rules'] for row in rows] == ['replicated', 'tensor', 'fsdp']
  replicated, tensor, fsdp = rows
  assert all(row['batch_size'] == 4 for row in rows)
  assert replicated['params_vs_replicated'] == 1.0
  assert tensor['params_vs_replicated'] == pytest.approx(1 / 4, rel=0.1)
  assert fsdp['params_vs_replicated'] == pytest.approx(1 / 2, rel=0.1)
  assert tensor['cache_vs_replicated'] == 0.25
  assert fsdp['cache_vs_replicated'] == 1.0
  # Replicated parameters: one iteration's only collective is the loop
  # condition's, whether the examples split over 'data' have all ended.
  assert replicated['greedy_collective_kinds'] == {'all-reduce': 1}
  # 'tensor': all-reduces only, at least one per sublayer and the
  # embedding lookup's; 'fsdp' gathers parameters where they are used.
  assert set(tensor['greedy_collective_kinds']) == {'all-reduce'}
  assert tensor['greedy_collectives'] >= 2 * 2 + 1
  assert fsdp['greedy_collective_kinds']['all-gather'] > 0
  for row in rows:
    for decode in sharded.DECODES:
      assert row[f'{decode}_collective_bytes'] >= row[
          f'{decode}_collectives']
      assert row[f'{decode}_compile_s'] > 0
  table = report.sharding_markdown(rows)
  assert table.splitlines()[0].startswith('| rules ')
  assert len(table.splitlines()) == 2 + 3


@pytest.mark.slow
def test_only_rule_sets_whose_axis_the_mesh_has():
  rows = sharded.table(small_model(), mesh_config((8,), ('data',)),
                       np.full((8, 5), 7, np.int32), max_len=4, k=2,
                       log=lambda _: None)
  assert [row['rules'] for row in rows] == ['replicated', 'fsdp']


def test_the_timed_decoder_follows_the_configs_rules():
  model = small_model()
  assert sharded.decoder(mesh_config(), model, [1, 8]).mesh is None
  decoder = sharded.decoder(mesh_config(rules='tensor'), model, [2, 8])
  assert dict(decoder.mesh.shape) == {'data': 2, 'model': 4}
  kernel = decoder.model.decoder_layers[0].ffn.up.kernel[...]
  assert kernel.sharding.spec == P(None, 'model')
  with pytest.raises(errors.ConfigError, match="--batch_sizes=1,8: each "
                     "must split over the 2 devices of mesh axis 'data'"):
    sharded.decoder(mesh_config(rules='tensor'), model, [1, 8])
  with pytest.raises(errors.ConfigError, match='mesh.param_rules:'):
    sharded.decoder(mesh_config((8,), ('data',), 'tensor'), model, [8])
