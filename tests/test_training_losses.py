"""Losses: per-head targets, the mean loss and the random-head estimate."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models.drafters import draft_layer
from bpd_jax.models.mixture import OutputMixture
from bpd_jax.training import losses


def test_shift_right_and_shifted_targets():
  target = jnp.array([[5, 6, 7, 1, 0]])
  np.testing.assert_array_equal(losses.shift_right(target, 2),
                                [[2, 5, 6, 7, 1]])
  labels = losses.shifted_targets(target, 1, 2)
  np.testing.assert_array_equal(labels[0, :, 0], [6, 7, 1, 0, 0])  # Head 2.
  np.testing.assert_array_equal(labels[0, :, 1], [7, 1, 0, 0, 0])  # Head 3.


def cross_entropy(logits, labels, label_smoothing):
  """optax's cross-entropy against label-smoothed one-hot targets, per
  token: the oracle of `losses.token_losses`."""
  targets = optax.smooth_labels(jax.nn.one_hot(labels, logits.shape[-1]),
                                label_smoothing)
  return optax.softmax_cross_entropy(logits, targets)


@pytest.mark.parametrize('label_smoothing', [0.0, 0.1, 0.5])
def test_token_losses_are_optax_cross_entropy(label_smoothing):
  logits = 3.0 * jax.random.normal(jax.random.key(0), (2, 5, 3, 12))
  labels = jax.random.randint(jax.random.key(1), (2, 5, 3), 0, 12)
  np.testing.assert_allclose(
      losses.token_losses(logits, labels, label_smoothing),
      cross_entropy(logits, labels, label_smoothing), rtol=1e-5, atol=1e-6)


def setup():
  config = TransformerConfig.from_size('tiny', vocab_size=12,
                                       num_proposal_heads=4)
  model = Transformer(config, rngs=nnx.Rngs(0))
  batch = dict(source=jnp.array([[5, 6, 7, 1], [8, 1, 0, 0]]),
               target=jnp.array([[9, 10, 11, 4, 1], [6, 1, 0, 0, 0]]))
  return model, batch


# Compiled once per set of heads: eager, the draws below took half a minute.
heads_loss = nnx.jit(losses.heads_loss, static_argnames=(
    'first', 'count', 'label_smoothing', 'random_head', 'head1_weight',
    'input_dropout', 'position_fraction', 'head_targets', 'draft_inputs',
    'loss_decay', 'acceptance_weighted'))


def loss(model, batch, first, count, random_head=False, head_key=None):
  return heads_loss(
      model, batch, first=first, count=count, label_smoothing=0.1,
      random_head=random_head, dropout_key=None,
      head_key=head_key if head_key is not None else jax.random.key(0))


def test_a_mixture_output_learns_its_likelihood_of_the_labels():
  """With a mixture output, a head's loss is the mixture's negative
  log-likelihood of its labels (the label route), and its accuracy counts
  the argmax of the whole distribution."""
  config = TransformerConfig.from_size(
      'tiny', vocab_size=3 + 20, num_proposal_heads=2,
      mixture=OutputMixture(2, 3))
  model = Transformer(config, rngs=nnx.Rngs(0))
  batch = dict(source=jnp.array([[5, 6, 7, 1]]),
               target=jnp.array([[9, 10, 11, 4, 12, 0]]))
  total, metrics = heads_loss(
      model, batch, first=0, count=1, label_smoothing=0.0, random_head=False,
      dropout_key=None, head_key=jax.random.key(0))
  hidden = model(batch['source'], losses.shift_right(batch['target'], 2))
  log_probs = model.head_logits(hidden, 0, 1)[:, :, 0]
  labels = batch['target']
  real = labels != 0
  at_labels = jnp.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  np.testing.assert_allclose(float(total), float(-at_labels[real].mean()),
                             rtol=1e-4)
  correct = (jnp.argmax(log_probs, -1) == labels)[real].sum()
  assert float(metrics['correct'][0]) == float(correct)
  assert float(metrics['tokens'][0]) == 5


def test_mean_loss_is_mean_of_single_head_losses():
  model, batch = setup()
  mean, metrics = loss(model, batch, 1, 3)
  singles = [float(loss(model, batch, h, 1)[0]) for h in (1, 2, 3)]
  np.testing.assert_allclose(float(mean), np.mean(singles), rtol=1e-6)
  # Per-head metrics land at each head's index; head 1 was not trained.
  assert metrics['tokens'][0] == 0 and (metrics['tokens'][1:] > 0).all()
  # Head h has fewer labels: targets run out h - 1 positions earlier.
  assert metrics['tokens'][1] > metrics['tokens'][3]


def test_random_head_loss_is_an_unbiased_estimate():
  model, batch = setup()
  mean, _ = loss(model, batch, 1, 3)
  singles = {round(float(loss(model, batch, h, 1)[0]), 5) for h in (1, 2, 3)}
  draws = [loss(model, batch, 1, 3, True, jax.random.key(i))
           for i in range(60)]
  # Each draw is exactly one head's loss, the heads drawn uniformly ...
  values = [round(float(value), 5) for value, _ in draws]
  assert set(values) <= singles and len(set(values)) == 3
  drawn = [int(np.flatnonzero(m['tokens'])[0]) for _, m in draws]
  assert min(np.bincount(drawn)[1:]) >= 10
  # ... so the expectation over the draw is the mean loss: averaged over the
  # three heads with equal weight it is exactly the mean.
  np.testing.assert_allclose(np.mean(sorted(singles)), float(mean),
                             rtol=1e-5)


def test_dropout_key_changes_the_loss_only_when_given():
  model, batch = setup()
  plain = loss(model, batch, 0, 1)[0]
  np.testing.assert_array_equal(plain, loss(model, batch, 0, 1)[0])
  dropped = heads_loss(model, batch, first=0, count=1, label_smoothing=0.1,
                       random_head=False, dropout_key=jax.random.key(3),
                       head_key=jax.random.key(0))[0]
  assert float(dropped) != float(plain)


def test_heads_after_head1_decay_with_their_distance():
  decay = np.exp(-np.arange(3) / 2.0)
  np.testing.assert_allclose(losses.head_weights(1, 3, 0.0, decay=2.0),
                             decay / decay.sum(), rtol=1e-6)
  # Head 1 keeps its weight; heads 2.. share the rest by the decay.
  np.testing.assert_allclose(losses.head_weights(0, 4, 0.7, decay=2.0),
                             [0.7, *(0.3 * decay / decay.sum())], rtol=1e-6)
  model, batch = setup()
  singles = [float(loss(model, batch, h, 1)[0]) for h in range(1, 4)]
  decayed, _ = heads_loss(
      model, batch, first=1, count=3, label_smoothing=0.1, random_head=False,
      dropout_key=None, head_key=jax.random.key(0), loss_decay=2.0)
  np.testing.assert_allclose(float(decayed),
                             np.dot(decay / decay.sum(), singles), rtol=1e-5)


def test_head1_weight_in_fine_tuning():
  model, batch = setup()
  singles = [float(loss(model, batch, h, 1)[0]) for h in range(4)]
  weighted, _ = heads_loss(
      model, batch, first=0, count=4, label_smoothing=0.1, random_head=False,
      dropout_key=None, head_key=jax.random.key(0), head1_weight=0.7)
  np.testing.assert_allclose(
      float(weighted), 0.7 * singles[0] + 0.3 * np.mean(singles[1:]),
      rtol=1e-5)
  np.testing.assert_allclose(losses.head_weights(0, 4, 0.7),
                             [0.7, 0.1, 0.1, 0.1], rtol=1e-6)
  # Without head 1 among the trained heads the weight does not apply.
  np.testing.assert_allclose(losses.head_weights(1, 3, 0.7), [1 / 3] * 3)
  # Random draws follow the weights: head 1 in ~70% of them.
  draws = [heads_loss(
      model, batch, first=0, count=4, label_smoothing=0.1, random_head=True,
      dropout_key=None, head_key=jax.random.key(i), head1_weight=0.7)[1]
           for i in range(100)]
  head1 = sum(int(m['tokens'][0] > 0) for m in draws)
  assert 55 <= head1 <= 85


def test_input_dropout_hides_decoder_inputs_but_not_labels():
  _, batch = setup()
  model = Transformer(TransformerConfig.from_size(
      'tiny', vocab_size=12, num_proposal_heads=4, dropout_rate=0.0),
                      rngs=nnx.Rngs(0))  # Only the input dropout is random.
  run = lambda rate, key=jax.random.key(3): losses.heads_loss(
      model, batch, first=0, count=1, label_smoothing=0.0,
      random_head=False, dropout_key=key, head_key=jax.random.key(0),
      input_dropout=rate)
  # Every input hidden (rate 1): the loss of a decoder that reads bos and
  # pads only, against the same labels.
  hidden_inputs = jnp.where(jnp.arange(5) == 0, model.config.bos_id,
                            model.config.pad_id)
  hidden = model(batch['source'], jnp.broadcast_to(hidden_inputs, (2, 5)))
  logits = model.head_logits(hidden, 0, 1)[:, :, 0]
  mask = batch['target'] != model.config.pad_id
  expected = (cross_entropy(logits, batch['target'], 0.0) * mask).sum()
  np.testing.assert_allclose(run(1.0)[0], expected / mask.sum(), rtol=1e-5)
  # Rate 0, or no dropout key (evaluation): the inputs are the targets.
  np.testing.assert_allclose(run(0.0)[0], run(0.5, None)[0], rtol=1e-6)
  assert float(run(0.5)[0]) != float(run(0.0)[0])


@pytest.mark.parametrize('encoder_layers', [2, 0])
def test_scheduled_sampling_feeds_the_models_own_predictions(encoder_layers):
  """Rate 1: the loss of a decoder that reads, after bos, its own argmax
  of a first pass at every learned token (a decoder-only model's prompt
  stays the data's); rate 0 or no key: the data's inputs."""
  model = Transformer(TransformerConfig.from_size(
      'tiny', vocab_size=12, num_proposal_heads=2, dropout_rate=0.0,
      num_encoder_layers=encoder_layers), rngs=nnx.Rngs(0))
  batch = dict(source=jnp.array([[5, 6, 7], [8, 0, 0]]),
               target=jnp.array([[9, 10, 4, 1], [6, 1, 0, 0]]))
  run = lambda rate, key=jax.random.key(3): losses.heads_loss(
      model, batch, first=0, count=1, label_smoothing=0.0,
      random_head=False, dropout_key=key, head_key=jax.random.key(0),
      scheduled_sampling=rate)[0]
  source, tokens, labels = batch['source'], batch['target'], batch['target']
  if not encoder_layers:
    tokens, labels = losses.decoder_only_sequence(source, tokens, 0)
    source = None
  data_input = losses.shift_right(tokens, model.config.bos_id)
  first = model.head_logits(model(source, data_input), 0, 1)[:, :, 0]
  own_input = losses.shift_right(jnp.argmax(first, -1), model.config.bos_id)
  learned = losses.shift_right(labels != 0, False)
  assert learned.sum() < learned.size  # Prompt and padding stay the data's.
  fed = jnp.where(learned, own_input, data_input)
  assert (fed != data_input).any()
  logits = model.head_logits(model(source, fed), 0, 1)[:, :, 0]
  mask = labels != 0
  expected = (cross_entropy(logits, labels, 0.0) * mask).sum() / mask.sum()
  np.testing.assert_allclose(run(1.0), expected, rtol=1e-5)
  np.testing.assert_allclose(run(0.0), run(0.5, None), rtol=1e-6)
  assert float(run(0.5)) != float(run(0.0))


def test_sequential_heads_are_trained_on_the_true_previous_tokens():
  """Teacher forcing: head h reads the true token h - 1 positions on, so
  its loss is the cross-entropy of the heads fed exactly those tokens."""
  config = TransformerConfig.from_size('tiny', vocab_size=12,
                                       num_proposal_heads=4,
                                       head_layer='sequential')
  model = Transformer(config, rngs=nnx.Rngs(0))
  _, batch = setup()
  value, metrics = loss(model, batch, 1, 3)
  target = batch['target']
  hidden = model(batch['source'], losses.shift_right(target, config.bos_id))
  next_tokens = losses.shifted_targets(target, 0, 3)
  logits = model.head_logits(hidden, 1, 3, next_tokens)
  labels = losses.shifted_targets(target, 1, 3)
  mask = labels != 0
  per_head = (cross_entropy(logits, labels, 0.1) * mask).sum((0, 1)) \
      / mask.sum((0, 1))
  np.testing.assert_allclose(float(value), float(per_head.mean()), rtol=1e-5)
  # Other tokens fed to the heads give another loss: the labels are read.
  wrong = model.head_logits(hidden, 1, 3, (next_tokens + 1) % 12)
  other = (cross_entropy(wrong, labels, 0.1) * mask).sum() / mask.sum()
  assert abs(float(other) - float(value)) > 1e-4
  assert (metrics['tokens'][1:] > 0).all()


def four_heads_teacher_forced(model, batch):
  """Heads 1..4 on every position of the batch, fed the true tokens: labels
  [batch, T, 4], logits [batch, T, 4, vocab] and the labels' mask."""
  target = batch['target']
  hidden = model(batch['source'],
                 losses.shift_right(target, model.config.bos_id))
  labels = losses.shifted_targets(target, 0, 4)
  logits = model.head_logits(hidden, 0, 4,
                             losses.shifted_targets(target, 0, 3))
  return labels, logits, np.asarray(labels != 0)


@pytest.mark.parametrize('head_layer', ['independent', 'joint', 'sequential'])
def test_sampled_positions_train_the_later_heads_on_their_sample(head_layer):
  """Head 1 keeps every position; heads 2.. are trained on the sampled
  positions alone, exactly the full pass's losses there."""
  config = TransformerConfig.from_size('tiny', vocab_size=12,
                                       num_proposal_heads=4,
                                       head_layer=head_layer)
  model = Transformer(config, rngs=nnx.Rngs(0))
  _, batch = setup()
  key = jax.random.key(5)
  value, metrics = heads_loss(
      model, batch, first=0, count=4, label_smoothing=0.1, random_head=False,
      dropout_key=None, head_key=key, head1_weight=0.4,
      position_fraction=0.4)
  target = batch['target']
  labels, logits, mask = four_heads_teacher_forced(model, batch)
  token = np.asarray(cross_entropy(logits, labels, 0.1)) * mask
  rows = np.asarray(losses.sampled_positions(key, target, 0.4, 0))
  assert rows.shape == (2, 2)  # ceil(0.4 * 5) positions a row.
  sampled = np.zeros(target.shape, bool)
  sampled[np.arange(2)[:, None], rows] = True
  tokens = [mask[..., 0].sum()] + [mask[..., h][sampled].sum()
                                   for h in (1, 2, 3)]
  per_head = [token[..., 0].sum() / tokens[0]] + [
      token[..., h][sampled].sum() / tokens[h] for h in (1, 2, 3)]
  np.testing.assert_allclose(float(value), 0.4 * per_head[0]
                             + 0.2 * sum(per_head[1:]), rtol=1e-5)
  np.testing.assert_array_equal(metrics['tokens'], tokens)
  assert tokens[1] < mask[..., 1].sum()  # A sample, not every position.
  # Another key, another sample (of row 0's five real tokens), another loss.
  other, _ = heads_loss(
      model, batch, first=0, count=4, label_smoothing=0.1, random_head=False,
      dropout_key=None, head_key=jax.random.key(6), head1_weight=0.4,
      position_fraction=0.4)
  assert float(other) != float(value)


def test_reach_weights_multiply_the_heads_before_without_gradient():
  right = jnp.log(jnp.array([[[0.9, 0.5, 0.4, 0.2]]]))
  # Heads 2..5: head 2 is always reached, head 3 when head 2 was right, ...
  np.testing.assert_allclose(losses.reach_weights(right, 1),
                             [[[1.0, 0.9, 0.45, 0.18]]], rtol=1e-6)
  # With head 1 (the base's own token, always accepted) among them.
  np.testing.assert_allclose(losses.reach_weights(right, 0),
                             [[[1.0, 1.0, 0.5, 0.2]]], rtol=1e-6)
  gradient = jax.grad(lambda x: losses.reach_weights(x, 1).sum())(right)
  np.testing.assert_array_equal(gradient, 0.0)


# The block drafter's path (sampled positions) by default; every position
# slow (the same weights, `_every_position_sums`' call).
@pytest.mark.parametrize('fraction', [
    pytest.param(1.0, marks=pytest.mark.slow), 0.4])
def test_acceptance_weighting_weighs_each_head_by_its_reach(fraction):
  """Head i's loss at a position is weighed by the product of the
  probabilities the heads before it (head 1 excepted) gave the labels
  there, on every position or on the sampled ones."""
  config = TransformerConfig.from_size('tiny', vocab_size=12,
                                       num_proposal_heads=4,
                                       head_layer='sequential')
  model = Transformer(config, rngs=nnx.Rngs(0))
  _, batch = setup()
  key = jax.random.key(5)
  options = dict(first=0, count=4, label_smoothing=0.1, random_head=False,
                 dropout_key=None, head_key=key, head1_weight=0.4,
                 position_fraction=fraction)
  value, _ = heads_loss(model, batch, acceptance_weighted=True, **options)
  plain, _ = heads_loss(model, batch, **options)
  target = batch['target']
  labels, logits, mask = four_heads_teacher_forced(model, batch)
  probs = np.asarray(jax.nn.softmax(logits, -1))
  right = np.take_along_axis(probs, np.asarray(labels)[..., None], -1)[..., 0]
  right[..., 0] = 1.0
  reach = np.concatenate([np.ones_like(right[..., :1]),
                          np.cumprod(right, -1)[..., :-1]], -1)
  token = np.asarray(cross_entropy(logits, labels, 0.1)) * mask * reach
  if fraction < 1:
    rows = np.asarray(losses.sampled_positions(key, target, fraction, 0))
    sampled = np.zeros(target.shape, bool)
    sampled[np.arange(2)[:, None], rows] = True
  else:
    sampled = np.ones(target.shape, bool)
  per_head = [token[..., 0].sum() / mask[..., 0].sum()] + [
      token[..., h][sampled].sum() / mask[..., h][sampled].sum()
      for h in (1, 2, 3)]
  np.testing.assert_allclose(float(value), 0.4 * per_head[0]
                             + 0.2 * sum(per_head[1:]), rtol=1e-5)
  assert float(value) < float(plain)  # Weights <= 1, most below.


def test_sampled_positions_are_distinct_real_tokens_drawn_uniformly():
  target = jnp.array([[5, 6, 7, 8, 1, 0, 0, 0], [5, 1, 0, 0, 0, 0, 0, 0]])
  draws = np.asarray(jax.vmap(
      lambda key: losses.sampled_positions(key, target, 0.5, 0))(
          jax.random.split(jax.random.key(0), 400)))  # [400, 2, 4]
  assert all(len(set(row)) == 4 for draw in draws for row in draw)
  # Row 0 has 5 real tokens: 4 of them each time, each in ~4/5 of draws.
  assert (draws[:, 0] < 5).all()
  frequency = np.bincount(draws[:, 0].ravel(), minlength=5) / len(draws)
  np.testing.assert_allclose(frequency, 0.8, atol=0.07)
  # Row 1 has 2: both every time, the rest padding.
  assert all({0, 1} <= set(row) for row in draws[:, 1])


def test_decoder_only_sequence_puts_each_prompt_before_its_target():
  source = jnp.array([[5, 6, 0], [7, 0, 0], [0, 0, 0]])
  target = jnp.array([[8, 1], [9, 10], [11, 1]])
  tokens, labels = losses.decoder_only_sequence(source, target, 0)
  np.testing.assert_array_equal(tokens, [[5, 6, 8, 1, 0], [7, 9, 10, 0, 0],
                                         [11, 1, 0, 0, 0]])
  np.testing.assert_array_equal(labels, [[0, 0, 8, 1, 0], [0, 9, 10, 0, 0],
                                         [11, 1, 0, 0, 0]])
  empty = jnp.zeros((3, 0), jnp.int32)  # Plain language modelling.
  tokens, labels = losses.decoder_only_sequence(empty, target, 0)
  np.testing.assert_array_equal(tokens, target)
  np.testing.assert_array_equal(labels, target)


def test_a_decoder_only_model_learns_the_target_after_its_prompt():
  config = TransformerConfig.from_size('tiny', vocab_size=12,
                                       num_encoder_layers=0,
                                       num_proposal_heads=3)
  model = Transformer(config, rngs=nnx.Rngs(0))
  batch = dict(source=jnp.array([[5, 6, 7], [8, 0, 0]]),
               target=jnp.array([[9, 10, 1], [6, 1, 0]]))
  _, metrics = loss(model, batch, 0, 3)
  # Only target tokens are labels; head h predicts each from h - 1
  # positions earlier, inside the prompt too (the second row's first
  # target token is one position from the start: head 3 cannot).
  np.testing.assert_array_equal(metrics['tokens'], [5, 5, 4])
  # The prompt conditions the loss but is not itself a label.
  other = dict(batch, source=jnp.array([[5, 6, 9], [8, 0, 0]]))
  assert float(loss(model, other, 0, 1)[0]) != float(
      loss(model, batch, 0, 1)[0])


@pytest.mark.parametrize('encoder_layers,head_layer,options', [
    (2, 'independent', {}),
    (0, 'sequential', dict(position_fraction=0.5)),
    (0, 'autoregressive', dict(head_targets='base'))])
def test_padding_with_minus_one_gives_the_losses_of_masked_0(
    encoder_layers, head_layer, options):
  """pad_id=-1 (no vocabulary id pads): the loss, the per-head sums and
  the gradient are those of the same weights padded with 0, and finite."""
  def model_padded_with(pad_id):
    return Transformer(TransformerConfig.from_size(
        'tiny', vocab_size=12, num_encoder_layers=encoder_layers,
        num_proposal_heads=3, head_layer=head_layer, pad_id=pad_id),
                       rngs=nnx.Rngs(0))

  def value_and_grad(model, batch):
    return nnx.value_and_grad(lambda m: heads_loss(
        m, batch, first=0, count=3, label_smoothing=0.1, random_head=False,
        dropout_key=None, head_key=jax.random.key(0), **options),
                              has_aux=True)(model)

  _, batch = setup()
  (loss_0, metrics_0), grads_0 = value_and_grad(model_padded_with(0), batch)
  minus = jax.tree.map(lambda x: jnp.where(x == 0, -1, x), batch)
  (loss_1, metrics_1), grads_1 = value_and_grad(model_padded_with(-1), minus)
  assert np.isfinite(float(loss_1))
  np.testing.assert_allclose(loss_1, loss_0, rtol=1e-6)
  jax.tree.map(np.testing.assert_array_equal, metrics_1, metrics_0)
  for g1, g0 in zip(jax.tree.leaves(grads_1), jax.tree.leaves(grads_0)):
    assert np.isfinite(np.asarray(g1)).all()
    np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-7)


def test_token_losses_of_minus_one_labels_are_finite():
  logits = jnp.array([[0.0, 1.0, 2.0], [3.0, 0.0, -1.0]])
  token_losses = losses.token_losses(logits, jnp.array([-1, 2]), 0.1)
  assert np.isfinite(np.asarray(token_losses)).all()
  np.testing.assert_allclose(
      token_losses[1], losses.token_losses(logits, jnp.array([0, 2]), 0.1)[1])


def test_base_targets_are_the_base_models_own_distribution():
  """head_targets='base': head h at position t learns softmax of the
  base's logits at t + h - 1 (no smoothing), its accuracy still counts the
  data; head 1, when trained, keeps the data."""
  model, batch = setup()
  value, metrics = heads_loss(
      model, batch, first=1, count=3, label_smoothing=0.1, random_head=False,
      dropout_key=jax.random.key(1), head_key=jax.random.key(0),
      head_targets='base')
  target = batch['target']
  # The teacher is the pass without dropout; the students are with it.
  clean = model(batch['source'], losses.shift_right(target,
                                                    model.config.bos_id))
  base = jax.nn.softmax(model.head_logits(clean, 0, 1)[:, :, 0])
  labels = losses.shifted_targets(target, 1, 3)
  mask = labels != 0
  rngs = nnx.Rngs(dropout=jax.random.key(1))
  hidden = model(batch['source'], losses.shift_right(target,
                                                     model.config.bos_id),
                 dropout_rngs=rngs)
  log_probs = jax.nn.log_softmax(model.head_logits(hidden, 1, 3))
  per_head = []
  for h in range(3):
    soft = jnp.pad(base, ((0, 0), (0, 4), (0, 0)))[:, h + 1:h + 1 + 5]
    cross = -(soft * log_probs[:, :, h]).sum(-1)
    per_head.append((cross * mask[..., h]).sum() / mask[..., h].sum())
  np.testing.assert_allclose(float(value), float(np.mean(per_head)),
                             rtol=1e-5)
  data, data_metrics = loss(model, batch, 1, 3)
  assert abs(float(data) - float(value)) > 1e-3
  np.testing.assert_array_equal(metrics['tokens'], data_metrics['tokens'])
  # Head 1 (fine-tuning) learns the data under either target.
  for targets in ('data', 'base'):
    head1 = heads_loss(
        model, batch, first=0, count=1, label_smoothing=0.1,
        random_head=False, dropout_key=None, head_key=jax.random.key(0),
        head_targets=targets)[0]
    np.testing.assert_allclose(float(head1), float(loss(model, batch, 0, 1)[0]),
                               rtol=1e-6)


@pytest.mark.parametrize('head_layer', ['sequential', 'autoregressive'])
def test_own_draft_inputs_feed_the_heads_their_own_drafts(head_layer):
  """draft_inputs='own' (the training-time test): head h reads head 1's
  token (the true one: the prefix) and the tokens heads 2 .. h - 1 would
  have drafted at that position, each the argmax of the head before, as
  when decoding; the labels stay the data's."""
  config = TransformerConfig.from_size(
      'tiny', vocab_size=12, num_proposal_heads=4, head_layer=head_layer,
      dropout_rate=0.0)
  model = Transformer(config, rngs=nnx.Rngs(0))
  _, batch = setup()
  value = heads_loss(
      model, batch, first=1, count=3, label_smoothing=0.1, random_head=False,
      dropout_key=None, head_key=jax.random.key(0), draft_inputs='own')[0]
  target = batch['target']
  hidden = model(batch['source'], losses.shift_right(target, config.bos_id))
  # Head 1's token is the true one (the prefix); heads 2, 3 draft theirs.
  drafts = losses.shifted_targets(target, 0, 1)
  for h in (1, 2):  # Head h + 1's draft, from the tokens before it.
    fed = jnp.concatenate([drafts, jnp.zeros_like(drafts[..., :3 - h])], -1)
    logits = model.head_logits(hidden, h, 1, fed)[:, :, 0]
    drafts = jnp.concatenate([drafts, jnp.argmax(logits, -1)[..., None]], -1)
  logits = model.head_logits(hidden, 1, 3, drafts)
  labels = losses.shifted_targets(target, 1, 3)
  mask = labels != 0
  per_head = (cross_entropy(logits, labels, 0.1) * mask).sum((0, 1)) \
      / mask.sum((0, 1))
  expected = per_head.mean()
  if head_layer == 'autoregressive':  # EAGLE's feature regression too.
    expected += draft_layer.feature_loss(
        model.head_states(hidden, 1, 3, drafts), 1, hidden, target, 0)
  np.testing.assert_allclose(float(value), float(expected), rtol=1e-5)
  teacher_forced = loss(model, batch, 1, 3)[0]
  assert abs(float(teacher_forced) - float(value)) > 1e-4
