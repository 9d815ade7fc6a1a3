"""Step costs: measured per k with one program each, bad k refused."""

import numpy as np
import pytest
from flax import nnx

from bpd_jax.bench import step_costs
from bpd_jax.models import Transformer, TransformerConfig

CONFIG = TransformerConfig(vocab_size=13, d_model=16, d_ff=32, num_heads=2,
                           num_encoder_layers=1, num_decoder_layers=1,
                           max_source_len=8, max_target_len=32,
                           num_proposal_heads=3)


@pytest.mark.parametrize('encoder_layers', [1, 0])
def test_every_k_is_timed_with_one_program(encoder_layers):
  model = Transformer(CONFIG.__class__(**{
      **CONFIG.__dict__, 'num_encoder_layers': encoder_layers}),
                      rngs=nnx.Rngs(0))
  compiled = step_costs._chained_calls._cache_size()
  costs = step_costs.measure_all(model, [1, 3], batch_size=2, source_len=5,
                                 max_len=10, repeats=2)
  assert set(costs) == {1, 3}
  # Both loop lengths and every repeat run one program per k: a slope
  # between two programs would time a compilation, not a call.
  assert step_costs._chained_calls._cache_size() == compiled + 2


@pytest.mark.parametrize('head_layer', ['sequential', 'block'])
def test_drafters_with_a_cache_or_a_chain_draft_inside_the_timed_call(
    head_layer):
  model = Transformer(CONFIG.__class__(**{
      **CONFIG.__dict__, 'head_layer': head_layer}), rngs=nnx.Rngs(0))
  costs = step_costs.measure_all(model, [3], batch_size=2, source_len=5,
                                 max_len=10, repeats=2)
  # Sequential heads draft through model.draft (proposal_logits would
  # raise), the block drafter through its cache.
  assert set(costs) == {3}


@pytest.mark.parametrize('k', [0, 4])
def test_k_outside_the_heads(k):
  model = Transformer(CONFIG, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r'must be in \[1, 3\]'):
    step_costs.measure(model, batch_size=1, source_len=4, max_len=8, k=k)


def test_a_drafting_vocabulary_is_timed_in_the_call():
  model = Transformer(CONFIG.__class__(**{
      **CONFIG.__dict__, 'head_layer': 'sequential'}), rngs=nnx.Rngs(0))
  compiled = step_costs._chained_calls._cache_size()
  costs = step_costs.measure_all(model, [3], draft_ids=np.array([2, 5, 7]),
                                 batch_size=2, source_len=5, max_len=10,
                                 repeats=2)
  assert set(costs) == {3} and costs[3] > 0
  # Its own program: the drafts' projection has another shape.
  assert step_costs._chained_calls._cache_size() == compiled + 1


def test_the_verification_alone_runs_no_draft(monkeypatch):
  """draft=False times the base over k positions and head 1 only: with
  every way to draft broken, it still measures; the full call does not."""
  model = Transformer(CONFIG.__class__(**{
      **CONFIG.__dict__, 'head_layer': 'sequential'}), rngs=nnx.Rngs(0))

  def broken(*args, **kwargs):
    raise AssertionError('drafted')

  for name in ('draft', 'proposal_logits'):
    monkeypatch.setattr(Transformer, name, broken)
  costs = step_costs.measure_all(model, [1, 3], draft=False, batch_size=2,
                                 source_len=5, max_len=10, repeats=2)
  assert set(costs) == {1, 3} and costs[3] > 0
  with pytest.raises(AssertionError, match='drafted'):
    # A shape no other test compiles: the call is traced, not reused.
    step_costs.measure(model, batch_size=2, source_len=5, max_len=13, k=3,
                       repeats=2)
