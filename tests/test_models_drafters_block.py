"""The block drafter: one pass over [token, mask, ...] with the base's
features injected as context; decoding through its cache equals training."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.training import losses

import llama_like

TINY = dict(vocab_size=11, d_model=16, d_ff=32, num_heads=2,
            num_encoder_layers=2, num_decoder_layers=2, dropout_rate=0.0,
            max_source_len=12, max_target_len=24, num_proposal_heads=5,
            head_layer='block', head_hidden=24)


def block_model(**fields):
  return Transformer(TransformerConfig(**{**TINY, **fields}),
                     rngs=nnx.Rngs(0))


def sequences(model, batch=3, length=12, seed=0):
  """(source or None, decoder inputs [batch, length]) of random tokens."""
  rng = np.random.default_rng(seed)
  vocab = model.config.vocab_size
  source = None
  if model.config.is_encoder_decoder:
    source = jnp.asarray(rng.integers(3, vocab, (batch, 5)))
    source = source.at[1, 3:].set(0)  # Padding the source attention skips.
  return source, jnp.asarray(rng.integers(3, vocab, (batch, length)))


def training_logits(model, outputs, inputs, rows, k):
  """Heads 2..k at `rows` [batch, n] as training computes them (no
  cache): [batch, n, k - 1, vocab]."""
  next_tokens = jnp.roll(inputs, -1, axis=1)[..., None]
  states = model.head_states(outputs, 1, k - 1, next_tokens, rows=rows)
  return model.logits(states)


@pytest.mark.parametrize('fields', [
    {},  # The paper's encoder-decoder, reading no source.
    dict(draft_source='base'),  # Through the base's top-layer memory.
    dict(num_encoder_layers=0, draft_feature_layers=(0,)),  # Lower layer.
    dict(num_encoder_layers=0, block_layers=2, **llama_like.LLAMA),
    dict(draft_source='base', **llama_like.QWEN2),  # Grouped keys/values.
], ids=['paper', 'source', 'features', 'llama-2-layers', 'qwen2-source'])
def test_a_decoded_block_is_the_training_block_at_its_anchor(fields):
  """Heads 2..k drafted through the drafter's cache equal the training
  states (no cache) at the last accepted position: every context entry
  written at a scored position, those past the accepted one stale and
  unread, and a later call overwriting them."""
  model = block_model(**fields)
  source, inputs = sequences(model)
  outputs = model.run(source, inputs)
  cache = model.init_cache(3, 16, source)
  k = 5

  def check(cache, start, n, last):
    """A draft after position start + last from the n positions at start."""
    window = slice(start, start + n)
    logits, cache = model.proposal_logits(
        cache, outputs.features[:, window], inputs[:, start + 1:start + n + 1],
        jnp.full((3,), start), jnp.full((3,), last), k)
    anchor = jnp.full((3, 1), start + last)
    expected = training_logits(model, outputs, inputs, anchor, k)[:, 0]
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    return cache

  cache = check(cache, 0, 7, 2)  # Positions 3..6 written stale.
  cache = check(cache, 3, 5, 1)  # Overwrites them; draft after position 4.
  check(cache, 5, 3, 2)


def test_the_context_is_the_features_up_to_the_anchor():
  model = block_model(num_encoder_layers=0)
  _, inputs = sequences(model)
  outputs = model.run(None, inputs)
  rows = jnp.full((3, 1), 6)
  before = training_logits(model, outputs, inputs, rows, 5)
  later = outputs.features.at[:, 7:].add(1.0)
  moved = dataclass_replace(outputs, later)
  np.testing.assert_allclose(
      training_logits(model, moved, inputs, rows, 5), before, rtol=1e-6)
  earlier = dataclass_replace(outputs, outputs.features.at[:, 6].add(1.0))
  assert not np.allclose(training_logits(model, earlier, inputs, rows, 5),
                         before)


def dataclass_replace(outputs, features):
  return type(outputs)(outputs.hidden, features, outputs.source)


def test_block_positions_see_each_other_both_ways_and_length_masks():
  """A block's positions attend to later ones too (bidirectional): the
  first proposal of a 5-position block differs from a 3-position block's;
  a 5-position block whose length is 3 (`block_lengths`, training) is the
  3-position block decoding runs at k = 3."""
  model = block_model(num_encoder_layers=0)
  _, inputs = sequences(model)
  outputs = model.run(None, inputs)
  rows = jnp.array([[2, 6], [3, 3], [9, 1]])
  next_tokens = jnp.roll(inputs, -1, axis=1)[..., None]
  whole = model.head_states(outputs, 1, 4, next_tokens, rows=rows)
  short = model.head_states(outputs, 1, 2, next_tokens, rows=rows)
  assert not np.allclose(whole[:, :, :2], short)
  masked = model.head_states(outputs, 1, 4, next_tokens, rows=rows,
                             block_lengths=jnp.full((3, 2), 3))
  np.testing.assert_allclose(masked[:, :, :2], short, rtol=1e-5, atol=1e-6)


def test_rows_none_is_every_position():
  model = block_model(num_encoder_layers=0)
  _, inputs = sequences(model, length=8)
  outputs = model.run(None, inputs)
  next_tokens = jnp.roll(inputs, -1, axis=1)[..., None]
  every = model.head_states(outputs, 0, 5, next_tokens)
  assert every.shape == (3, 8, 5, 16)
  np.testing.assert_array_equal(every[:, :, 0], outputs.hidden)  # Head 1.
  rows = jnp.array([[4, 0], [7, 7], [1, 2]])
  np.testing.assert_allclose(
      model.head_states(outputs, 0, 5, next_tokens, rows=rows),
      jnp.take_along_axis(every, rows[..., None, None], axis=1), rtol=1e-5,
      atol=1e-6)


def test_training_lengths_are_half_full_the_rest_shorter():
  model = block_model(num_proposal_heads=8)
  lengths = np.asarray(model.heads.training_lengths(jax.random.key(0),
                                                    (400, 10)))
  assert set(np.unique(lengths)) == set(range(2, 9))
  assert 0.45 < (lengths == 8).mean() < 0.55
  assert block_model(num_proposal_heads=2).heads.training_lengths(
      jax.random.key(0), (4,)) is None


def test_the_loss_trains_no_head_past_a_blocks_length():
  """Heads past a position's block length are no labels of the loss: with
  every block 2 long, only head 2 is trained."""
  model = block_model(num_encoder_layers=0, num_proposal_heads=4)
  model.heads.training_lengths = lambda key, shape: jnp.full(shape, 2)
  rng = np.random.default_rng(0)
  batch = dict(source=jnp.asarray(rng.integers(3, 11, (2, 3))),
               target=jnp.asarray(rng.integers(3, 11, (2, 8))))
  for fraction in (1.0, 0.5):
    # Compiled: op by op, the loss takes seconds.
    loss = nnx.jit(functools.partial(
        losses.heads_loss, first=1, count=3, label_smoothing=0.0,
        random_head=False, dropout_key=None, position_fraction=fraction))
    _, metrics = loss(model, batch, head_key=jax.random.key(1))
    tokens = np.asarray(metrics['tokens'])
    assert tokens[1] > 0 and (tokens[2:] == 0).all(), tokens


def test_decoding_writes_the_context_of_every_scored_position():
  model = block_model(num_encoder_layers=0)
  _, inputs = sequences(model)
  outputs = model.run(None, inputs)
  cache = model.init_cache(3, 16)
  _, cache = model.proposal_logits(
      cache, outputs.features[:, :6], inputs[:, 1:7], jnp.zeros((3,),
                                                                jnp.int32),
      jnp.array([1, 5, 3]), 4)
  (entries,) = cache.draft
  layer = model.heads.layers[0]
  expected = layer.attention.entries(
      model.heads.context(outputs.features[:, :6]),
      jnp.broadcast_to(jnp.arange(6), (3, 6)))
  np.testing.assert_allclose(entries.key[:, :6], expected.key, rtol=1e-5,
                             atol=1e-6)
  assert not np.asarray(entries.key[:, 6:]).any()


@pytest.mark.parametrize('recurrent', [False, True])
def test_a_corrected_draft_is_the_training_correction_on_its_tokens(
    recurrent):
  """Drafted head after head through the cache, the corrected block
  drafter's heads equal the training-time heads fed the draft's own
  tokens; a recurrent correction's heads also read the corrected state
  before them (zeroing its weights on that state changes heads 3..k, not
  head 2, which reads none)."""
  model = block_model(num_encoder_layers=0, head_layer='block_corrected',
                      correction_recurrent=recurrent)
  correction = model.heads.correction
  # Made as the identity (zero output weights): given weights, it acts.
  correction.w_out[...] = jax.random.normal(
      jax.random.key(1), correction.w_out[...].shape)
  _, inputs = sequences(model)
  outputs = model.run(None, inputs)
  vocab, k, start, last = model.config.vocab_size, 5, 0, 3

  def choose(index, logits):  # Not the argmax: the draft must follow it.
    return (jnp.argmax(logits, -1) + index + 1) % vocab

  def draft(model):
    window = slice(start, start + 5)
    return model.draft(model.init_cache(3, 16), outputs.features[:, window],
                       inputs[:, start + 1:start + 6], jnp.full((3,), start),
                       jnp.full((3,), last), choose, k)

  proposals, logits, _ = draft(model)
  anchor = start + last
  next_tokens = np.array(jnp.stack([jnp.roll(inputs, -1, axis=1)] * (k - 1),
                                   axis=-1))
  next_tokens[:, anchor, 1:] = np.asarray(proposals[:, :k - 2])
  expected = model.head_logits(outputs, 1, k - 1, jnp.asarray(next_tokens))
  np.testing.assert_allclose(logits, expected[:, anchor], rtol=1e-4,
                             atol=1e-4)
  assert correction.w_in[...].shape[0] == (3 if recurrent else 2) * 16
  if recurrent:
    correction.w_in[...] = correction.w_in[...].at[32:].set(0.0)
    _, without, _ = draft(model)
    np.testing.assert_allclose(without[:, 0], logits[:, 0], rtol=1e-5)
    assert not np.allclose(without[:, 1:], logits[:, 1:], atol=1e-3)
