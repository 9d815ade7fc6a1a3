"""Training losses of the base model and the blockwise heads.

Head i (0-based) at decoder position t predicts target token t + i: head 0
is the ordinary next-token output. The loss of a set of heads is either the
mean of their per-head losses, or, as the paper proposes, the loss of one
head drawn uniformly at random each step: an unbiased estimate of that mean
which needs the vocabulary projection (the largest activation) of one head.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bpd_jax.infra import token_ids

# What the heads after head 1 learn (`heads_loss`'s head_targets).
HEAD_TARGETS = ('data', 'base')
# What the dependent heads read as the earlier heads' drafts (draft_inputs).
DRAFT_INPUTS = ('data', 'own')


def shift_right(target: jax.Array, bos_id: int) -> jax.Array:
  """Decoder input: [batch, length] target -> bos_id, target[:-1]."""
  return jnp.pad(target, ((0, 0), (1, 0)), constant_values=bos_id)[:, :-1]


def shifted_targets(target: jax.Array, first: int, count: int,
                    pad_id: int = token_ids.PAD_ID) -> jax.Array:
  """Labels of heads first .. first+count-1: [batch, length, count, ...].

  labels[b, t, j] = target[b, t + first + j], pad_id past the end; target
  is [batch, length, ...] (token ids, or any per-position values).
  """
  length = target.shape[1]
  padded = jnp.pad(target, ((0, 0), (0, first + count))
                   + ((0, 0),) * (target.ndim - 2), constant_values=pad_id)
  return jnp.stack([padded[:, first + j:first + j + length]
                    for j in range(count)], axis=2)


def token_losses(logits: jax.Array, labels: jax.Array,
                 label_smoothing: float) -> jax.Array:
  """Cross-entropy against label-smoothed one-hot targets, per token.

  Args:
    logits: [..., vocab].
    labels: [...] token ids; padding -1 (pad_id=-1) gives a finite loss
      the caller masks.
    label_smoothing: eps; the target is (1 - eps) one_hot + eps / vocab.

  Returns:
    [...]: logsumexp(logits) - (1 - eps) logits[label] - eps mean(logits),
    the same cross-entropy without building a [..., vocab] target (with 8
    heads the targets and their gradient were the largest tensors a step).
  """
  logits = logits.astype(jnp.float32)
  # A -1 label would wrap to the last logit; clamped, it reads logit 0.
  # Either is finite, so the caller's mask (times 0) zeroes its loss and
  # its gradient; a NaN there would not be zeroed.
  label_logits = jnp.take_along_axis(logits, jnp.maximum(labels, 0)[..., None],
                                     -1)[..., 0]
  return (jax.nn.logsumexp(logits, -1) - (1.0 - label_smoothing) * label_logits
          - label_smoothing * logits.mean(-1))


def head_weights(first: int, count: int, head1_weight: float,
                 decay: float = 0.0) -> jax.Array:
  """[count] weights of the trained heads in the loss; they sum to 1.

  Equal weights, unless head 1 (the scoring model) is among the trained
  heads and `head1_weight` > 0: then head 1 gets that weight and the others
  share the rest. Fine-tuning the whole model on the plain mean gives head 1
  a 1/k share, and the base model's own quality drops. With `decay` > 0
  the heads after head 1 share theirs in proportion to exp(-(i - 2) /
  decay), head i (1-based): a draft is accepted up to its first miss, so
  its early heads count most (DFlash's weighting of a block's positions).
  Python numbers (a config's), computed in float64 and rounded once.
  """
  heads = first + np.arange(count)  # 0-based.
  share = (np.exp(-np.maximum(heads - 1, 0) / decay) if decay > 0
           else np.ones(count))
  if first == 0 and count > 1 and head1_weight > 0:
    share[0] = 0.0
    weights = (1.0 - head1_weight) * share / share.sum()
    weights[0] = head1_weight
  else:
    weights = share / share.sum()
  return jnp.asarray(weights, jnp.float32)


def heads_loss(model, batch: dict, *, first: int, count: int,
               label_smoothing: float, random_head: bool,
               dropout_key: jax.Array, head_key: jax.Array,
               head1_weight: float = 0.0, input_dropout: float = 0.0,
               position_fraction: float = 1.0, head_targets: str = 'data',
               draft_inputs: str = 'data', scheduled_sampling: float = 0.0,
               loss_decay: float = 0.0, acceptance_weighted: bool = False):
  """Loss of heads first .. first+count-1 on a batch.

  Args:
    model: a Transformer. An encoder-decoder reads the source and predicts
      the target; a decoder-only model reads bos, source, target and
      predicts the target tokens only (`decoder_only_sequence`).
    batch: source [batch, S] and target [batch, T] ids, right-padded (the
      translation tasks' eos-ended; a language model's source is its
      prompt, S may be 0).
    first: 0-based index of the first trained head.
    count: number of trained heads.
    label_smoothing: mass spread over the vocabulary (0.1 in the paper).
    random_head: train one head drawn at random with the heads' weights
      (an unbiased estimate of the weighted mean), else the weighted mean.
    dropout_key: randomness of dropout (None: no dropout).
    head_key: randomness of the head draw.
    head1_weight: see `head_weights` (0: all heads weigh the same).
    loss_decay: see `head_weights` (0: the heads after head 1 weigh the
      same).
    acceptance_weighted: each head's loss at a position is weighed by
      `reach_weights`, the drafter's own probability (no gradient) of
      having drafted the heads before it right there: how likely
      verification reaches it. A loss on acceptance itself (DSpark's aim):
      a draft counts up to its first miss, so a position past a likely
      miss teaches less. Not with `random_head` (config_checks).
    input_dropout: probability that a decoder input token (bos excepted)
      is replaced by pad_id, drawn with `dropout_key`. Image models
      otherwise learn to copy the previous pixel and ignore their input
      image early in training; hiding some previous pixels makes the
      encoder's input worth reading (word dropout, Bowman et al. 2016).
    position_fraction: the heads after head 1 are trained on this fraction
      of each row's positions (ceil(fraction * T), real tokens first, drawn
      with `head_key`); head 1, when trained, keeps every position. Their
      layers and vocabulary projections are most of a fine-tuning step's
      cost, and a row's neighbouring positions teach them much the same:
      a sample of them costs a step that much less (a block drafter's
      blocks start at them). Not with `random_head`, nor with a drafter
      that reads every position (the draft layer): config_checks refuses
      both, and this function takes a checked combination.
    head_targets: what the heads after head 1 learn (one of HEAD_TARGETS):
      'data', the true tokens (label-smoothed); or 'base', the base
      model's own next-token distribution at the position they predict
      (self-distillation, as EAGLE and Medusa-2 train): verification
      accepts the base's tokens, not the data's. The base's distribution
      comes from a pass without dropout, with no gradient. Head 1, when
      trained, always learns the data.
    draft_inputs: what the dependent heads (sequential, autoregressive)
      read as the tokens drafted before theirs (one of DRAFT_INPUTS):
      'data', the true tokens (teacher forcing); or 'own', the tokens the
      heads before them (from head 2 on) would have drafted there (the
      argmax of their states; the training-time test of HASS and EAGLE-3),
      which is what they read when decoding. Head 1's token is the base's,
      always accepted: part of the prefix, the data in training.
    scheduled_sampling: probability that a decoder input token of the
      target (bos and a prompt excepted) is the model's own prediction
      there instead of the data's, drawn with `dropout_key` (parallel
      scheduled sampling, Duckworth et al. 2019): the argmax of a first
      pass without dropout on the data, with no gradient. What a model
      reads when decoding is its own output; trained only on the data's,
      an image model learns that a pixel's residual is its neighbour's,
      which is right given the true neighbour and copies its own guess
      when decoding. Applied before input dropout.

  A drafter may add a loss of its own (`Drafter.auxiliary_loss`: the draft
  layer's regression of each step's state to the base's feature there,
  EAGLE's), and may train each position on a block of its own length
  (`Drafter.training_lengths`: a block drafter's), the heads past it
  untrained there.

  Returns:
    (loss, metrics) where metrics holds per-head sums over the batch, each
    [num_proposal_heads]: loss_sum, correct, tokens (zero for heads that were
    not trained this step).
  """
  inputs = _decoder_pass(model, batch, first, count, dropout_key,
                         input_dropout, head_targets, scheduled_sampling)
  weights = head_weights(first, count, head1_weight, loss_decay)
  own_drafts = draft_inputs == 'own'
  if position_fraction < 1 and count > int(first == 0):
    sums = _sampled_position_sums(model, inputs, first, count, own_drafts,
                                  head_key, position_fraction,
                                  label_smoothing, acceptance_weighted)
    heads, feature_loss = first + jnp.arange(count), 0.0
  else:
    sums, heads, weights, feature_loss = _every_position_sums(
        model, inputs, first, count, own_drafts, random_head, head_key,
        weights, label_smoothing, acceptance_weighted)
  loss_sum, correct, tokens = sums
  per_head_loss = loss_sum / jnp.maximum(tokens, 1.0)
  num_heads = model.config.num_proposal_heads
  scatter = lambda values: jnp.zeros(num_heads).at[heads].add(values)
  metrics = dict(loss_sum=scatter(loss_sum), correct=scatter(correct),
                 tokens=scatter(tokens))
  return (per_head_loss * weights).sum() + feature_loss, metrics


class _Pass(NamedTuple):
  """A training pass's decoder outputs and what the heads learn from them
  (`_decoder_pass`)."""
  target: jax.Array  # [batch, T] labels (pad_id where nothing is learned).
  outputs: object  # The model's DecoderOutputs; hidden [batch, T, d_model].
  next_tokens: jax.Array  # [batch, T, max(first + count - 1, 1)].
  labels: jax.Array  # [batch, T, count] of heads first .. first+count-1.
  soft: jax.Array | None  # [batch, T, count, vocab] `base_targets`, or None.


def _decoder_pass(model, batch: dict, first: int, count: int,
                  dropout_key: jax.Array | None, input_dropout: float,
                  head_targets: str, scheduled_sampling: float = 0.0
                  ) -> _Pass:
  """The decoder's pass over a batch (with dropout, scheduled sampling
  and input dropout when `dropout_key` is given), the heads' labels and,
  for head_targets='base', the base's distributions from a pass without
  dropout (see `heads_loss`)."""
  source, target = batch['source'], batch['target']
  tokens = target  # The decoder's tokens; `target` keeps the labels.
  if not model.config.is_encoder_decoder:
    tokens, target = decoder_only_sequence(source, target,
                                           model.config.pad_id)
    source = None
  rngs = None if dropout_key is None else nnx.Rngs(dropout=dropout_key)
  data_input = shift_right(tokens, model.config.bos_id)
  # Sequential heads read the true tokens before theirs (teacher forcing);
  # the other head layers ignore them (and XLA drops the unused slices).
  next_tokens = shifted_targets(tokens, 0, max(first + count - 1, 1),
                                model.config.pad_id)
  labels = shifted_targets(target, first, count, model.config.pad_id)
  sampling = bool(scheduled_sampling) and rngs is not None
  # Head 1's logits on the data's inputs without dropout, no gradient:
  # what scheduled sampling feeds back and the soft targets learn (one
  # pass for both; without dropout the training pass itself is that pass).
  clean_logits = None
  if sampling or (head_targets == 'base' and rngs is not None):
    clean_logits = _head1_logits(model, model.run(source, data_input).hidden,
                                 next_tokens)
  decoder_input = data_input
  if sampling:
    decoder_input = _with_own_predictions(
        decoder_input, clean_logits, target, model.config,
        jax.random.fold_in(dropout_key, 2), scheduled_sampling)
  if input_dropout and dropout_key is not None:
    hidden_token = jax.random.bernoulli(
        jax.random.fold_in(dropout_key, 1), input_dropout,
        decoder_input.shape).at[:, 0].set(False)
    decoder_input = jnp.where(hidden_token, model.config.pad_id,
                              decoder_input)
  outputs = model.run(source, decoder_input, dropout_rngs=rngs)
  soft = None
  if head_targets == 'base':
    if clean_logits is None:
      clean_logits = _head1_logits(model, outputs.hidden, next_tokens)
    soft = base_targets(clean_logits, first, count)
  return _Pass(target, outputs, next_tokens, labels, soft)


def _head1_logits(model, hidden: jax.Array,
                  next_tokens: jax.Array) -> jax.Array:
  """[batch, T, vocab] head 1's logits on a pass's outputs, no gradient."""
  return jax.lax.stop_gradient(
      model.head_logits(hidden, 0, 1, next_tokens)[:, :, 0])


def _with_own_predictions(decoder_input: jax.Array, logits: jax.Array,
                          target: jax.Array, config, key: jax.Array,
                          rate: float) -> jax.Array:
  """decoder_input [batch, T] with each input that is a learned token
  (target's label before it is not pad) replaced, with probability
  `rate`, by the argmax of `logits` [batch, T, vocab] there, the model's
  prediction on decoder_input (`heads_loss`'s scheduled_sampling)."""
  own = shift_right(jnp.argmax(logits, axis=-1).astype(decoder_input.dtype),
                    config.bos_id)
  learned = shift_right(target != config.pad_id, False)
  replaced = learned & jax.random.bernoulli(key, rate, decoder_input.shape)
  return jnp.where(replaced, own, decoder_input)


def _every_position_sums(model, inputs: _Pass, first: int, count: int,
                         own_drafts: bool, random_head: bool,
                         head_key: jax.Array, weights: jax.Array,
                         label_smoothing: float, acceptance_weighted: bool):
  """The heads on every position: (`_head_sums`, heads [n] and weights [n]
  of the sums' n heads, the draft layer's feature loss or 0.0). With
  `random_head` only one head, drawn with `weights`, is summed (never
  `acceptance_weighted`, which needs the heads before it)."""
  lengths = model.heads.training_lengths(jax.random.fold_in(head_key, 1),
                                         inputs.target.shape)
  states = model.head_states(inputs.outputs, first, count,
                             inputs.next_tokens, own_drafts,
                             block_lengths=lengths)
  # states: [batch, T, count, d_model]
  feature_loss = model.heads.auxiliary_loss(
      states, first, inputs.outputs.hidden, inputs.target,
      model.config.pad_id)
  labels = _within_blocks(inputs.labels, first, lengths, model.config.pad_id)
  soft = inputs.soft
  heads = first + jnp.arange(count)
  if random_head:
    # Only the drawn head goes through the vocabulary projection.
    drawn = jax.random.choice(head_key, count, p=weights)
    states = jnp.take(states, drawn[None], axis=2)
    labels = jnp.take(labels, drawn[None], axis=2)
    if soft is not None:
      soft = jnp.take(soft, drawn[None], axis=2)
    heads = first + drawn[None]
    weights = jnp.ones((1,))
  sums = _head_sums(model, states, labels, soft,
                    label_smoothing=label_smoothing,
                    reach_first=first if acceptance_weighted else None)
  return sums, heads, weights, feature_loss


def _sampled_position_sums(model, inputs: _Pass, first: int, count: int,
                           own_drafts: bool, head_key: jax.Array,
                           fraction: float, label_smoothing: float,
                           acceptance_weighted: bool):
  """`_head_sums` of head 1 (when trained) on every position and of the
  later heads on `sampled_positions` (`heads_loss`'s position_fraction)."""
  hidden, next_tokens = inputs.outputs.hidden, inputs.next_tokens
  labels, soft = inputs.labels, inputs.soft
  whole = int(first == 0)
  rows = sampled_positions(head_key, inputs.target, fraction,
                           model.config.pad_id)  # [batch, n]
  take = lambda x: jnp.take_along_axis(
      x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=1)
  lengths = model.heads.training_lengths(jax.random.fold_in(head_key, 1),
                                         rows.shape)
  groups = [(model.head_states(inputs.outputs, first + whole, count - whole,
                               next_tokens, own_drafts, rows=rows,
                               block_lengths=lengths),
             _within_blocks(take(labels[..., whole:]), first + whole,
                            lengths, model.config.pad_id),
             None if soft is None else take(soft[:, :, whole:]),
             first + whole)]
  if whole:  # Head 1 (the base) is always right: nothing to weigh.
    groups.insert(0, (model.head_states(hidden, first, 1, next_tokens),
                      labels[..., :1],
                      None if soft is None else soft[:, :, :1], None))
  return [jnp.concatenate(parts) for parts in zip(*(
      _head_sums(model, states, labels, soft,
                 label_smoothing=label_smoothing,
                 reach_first=group_first if acceptance_weighted else None)
      for states, labels, soft, group_first in groups))]


def decoder_only_sequence(source: jax.Array, target: jax.Array,
                          pad_id: int) -> tuple[jax.Array, jax.Array]:
  """A decoder-only model's sequence: each row's prompt, then its target.

  Args:
    source: [batch, S] prompts, right-padded with pad_id (S may be 0).
    target: [batch, T] continuations, right-padded with pad_id.
    pad_id: padding id (never a prompt token; -1 where no vocabulary id
      pads).

  Returns:
    (tokens [batch, S + T]: prompt then continuation, pad after them;
    labels [batch, S + T]: the same with the prompt's positions pad_id, so
    that only the continuation is learned).
  """
  prompt_length = (source != pad_id).sum(axis=1, keepdims=True)
  length = source.shape[1] + target.shape[1]
  position = jnp.arange(length)[None, :]
  in_target = position - prompt_length  # [batch, S + T]
  from_target = jnp.take_along_axis(
      target, jnp.clip(in_target, 0, target.shape[1] - 1), axis=1)
  from_target = jnp.where(in_target < target.shape[1], from_target, pad_id)
  padded_source = jnp.pad(source, ((0, 0), (0, target.shape[1])),
                          constant_values=pad_id)
  tokens = jnp.where(in_target < 0, padded_source, from_target)
  return tokens, jnp.where(in_target < 0, pad_id, tokens)


def sampled_positions(key: jax.Array, target: jax.Array, fraction: float,
                      pad_id: int) -> jax.Array:
  """[batch, ceil(fraction * T)] distinct positions of each row, drawn
  uniformly among its real (non-pad) target tokens, padding positions only
  where a row has too few."""
  count = max(1, math.ceil(fraction * target.shape[1]))
  scores = jax.random.uniform(key, target.shape)
  # Real tokens score in [1, 2), padding in [0, 1): real ones come first.
  scores = scores + (target != pad_id)
  return jax.lax.top_k(scores, count)[1]


def base_targets(base_logits: jax.Array, first: int,
                 count: int) -> jax.Array:
  """The base's distributions as the targets of heads first ..
  first+count-1: [batch, T, count, vocab].

  Head i (0-based) at position t predicts token t + i, which the base
  predicts at position t + i: its target is softmax(base_logits[:, t + i])
  (zeros past the end, where the labels are padding). Head 0 is the base
  itself: its column is zeros, which `_head_sums` reads as "learn the
  data" (the base distilled into itself learns nothing).

  Args:
    base_logits: [batch, T, vocab] the base's next-token logits (no
      gradient).
    first, count: the heads.
  """
  probs = jax.nn.softmax(base_logits.astype(jnp.float32), -1)
  targets = shifted_targets(probs, first, count, pad_id=0)
  return targets.at[:, :, 0].set(0.0) if first == 0 else targets


def _head_sums(model, states: jax.Array, labels: jax.Array,
               soft: jax.Array | None = None, *, label_smoothing: float,
               reach_first: int | None = None):
  """Per-head sums over the batch of the loss, correct argmaxes and label
  tokens, each [heads], from states [batch, n, heads, d_model] and labels
  [batch, n, heads]; with `soft` ([batch, n, heads, vocab], `base_targets`
  of the same heads) the heads after head 1 learn those distributions
  (cross-entropy, no smoothing) and `correct` still counts the labels.
  With `reach_first` (the 0-based index of the first of these heads) each
  loss is weighed by its `reach_weights`."""
  logits = model.logits(states)  # [batch, n, heads, vocab]
  mask = (labels != model.config.pad_id).astype(jnp.float32)
  if model.config.mixture is None:
    losses = token_losses(logits, labels, label_smoothing)
  else:  # Its likelihood, exact in the tails (config_checks: no smoothing).
    losses = -model.label_log_probs(states, labels)
  if soft is not None:
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    soft_losses = -(soft * log_probs).sum(-1)
    # Head 1's column is zeros (`base_targets`): it keeps the data.
    losses = jnp.where(soft.sum(-1) > 0, soft_losses, losses)
  if reach_first is not None:
    right = labels if soft is None else jnp.where(
        soft.sum(-1) > 0, jnp.argmax(soft, -1), labels)
    right = jnp.maximum(right, 0)  # Padding (-1) is masked below.
    if model.config.mixture is None:  # No [.., vocab] log-softmax built.
      right_log_probs = -token_losses(logits, right, 0.0)
    else:
      right_log_probs = model.label_log_probs(states, right)
    losses = losses * reach_weights(right_log_probs, reach_first)
  losses = losses * mask
  correct = (jnp.argmax(logits, -1) == labels) * mask
  return losses.sum((0, 1)), correct.sum((0, 1)), mask.sum((0, 1))


def reach_weights(right_log_probs: jax.Array, first: int) -> jax.Array:
  """[batch, n, heads] the drafter's probability (no gradient) that a
  draft at a position reaches each head: that heads first .. before it
  were all right there.

  Args:
    right_log_probs: [batch, n, heads] log q_i(y_i), the drafter's
      log-probability of the token verification accepts at head i (the
      base's: its argmax where the heads learn the base, else the label).
    first: 0-based index of the first head; head 1 (index 0) is the
      base's own token, always accepted.

  Returns:
    prod_{j < i} q_j(y_j) over the heads before head i (1 for the first):
    the probability that a draft sampled from q is accepted up to head i,
    a smooth stand-in for the greedy draft's (accepted up to its first
    miss). Weighing head i's loss by it spends the loss where
    verification looks, and past a likely miss less.
  """
  right = jnp.exp(right_log_probs.astype(jnp.float32))
  if first == 0:
    right = right.at[..., 0].set(1.0)
  before = jnp.cumprod(right, axis=-1)
  reach = jnp.concatenate([jnp.ones_like(before[..., :1]),
                           before[..., :-1]], -1)
  return jax.lax.stop_gradient(reach)


def _within_blocks(labels: jax.Array, first: int,
                   lengths: jax.Array | None, pad_id: int) -> jax.Array:
  """labels [batch, n, count] of heads first .. (0-based) with pad_id where
  a head lies past its position's block length (lengths [batch, n]; None:
  every head is trained)."""
  if lengths is None:
    return labels
  heads = first + jnp.arange(labels.shape[-1])
  return jnp.where(heads < lengths[..., None], labels, pad_id)
