"""Heads that read each other's proposals (after Hydra).

Head i reads the state of head i - 1 and the embedding of the token head
i - 1 proposed, s_i = s_{i-1} + FFN_i([s_{i-1}; e(x_{i-1})]) with s_1 = h
(head 1 is the base's output), so head 2 knows head 1's token and each
later head every earlier proposal (through the chain of states). Drafts
are then made one head after another; training feeds the true tokens
(teacher forcing) or, with the training-time test, the heads' own.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models.drafters import base

T = 'model'  # The mesh axis the 'tensor' rules split over.


class SequentialHeads(base.Drafter):
  """One feed-forward step a head, each reading the previous head's state
  and token.

  Parameters: w_in [n, 2 * d_model, hidden], b_in [n, hidden], w_out
  [n, hidden, d_model], b_out [n, d_model] for the n = k - 1 heads after
  head 1. Decoding weights: each head's own arrays, split once (tuples of
  `count` arrays: indexing the stacked arrays inside the decoding loop
  copied a head's weights at every drafting step).
  """
  dependent = True
  reads_tokens = True
  tensor_rules = (
      (r'(w_in|b_in)', (..., T)),  # By hidden unit.
      (r'w_out', (..., T, None)),  # [(heads,) hidden, d_model]: by unit.
  )

  def __init__(self, config, *, rngs: nnx.Rngs):
    self.num_heads = config.num_proposal_heads
    self.dtype = jnp.dtype(config.dtype)
    n = self.num_heads - 1
    if n == 0:
      return
    d_model, hidden = config.d_model, config.head_hidden or config.d_ff
    p, z = base.parameter_makers(config, rngs)
    self.w_in, self.b_in = p(n, 2 * d_model, hidden), z(n, hidden)
    self.w_out, self.b_out = p(n, hidden, d_model), z(n, d_model)

  def states(self, view, first, count, rows=None):
    if rows is not None:
      view = view.at_rows(rows)
    needed = first + count - 1
    if not needed:
      return view.hidden[..., None, :]
    if view.next_tokens is None or view.next_tokens.shape[-1] < needed:
      raise ValueError(f'sequential heads {first + 1}..{first + count} '
                       f'read the {needed} tokens before theirs: pass '
                       f'next_tokens.')
    previous = view.embed(view.next_tokens[..., :needed])
    weights = self.weights(needed + 1, None)
    states = [view.hidden]
    for index in range(needed):
      # Head 2 always reads head 1's token: the base's, always accepted,
      # so part of the prefix (the data, in training).
      token = (previous[..., index, :] if view.feed is None or index == 0
               else view.feed(index, states[-1]))
      states.append(self.step(weights, index, states[-1], token))
    return jnp.stack(states, axis=-2)[..., first:, :]

  def weights(self, k, dtype):
    del dtype
    heads = range(k - 1)
    split = lambda param: tuple(param[i].astype(self.dtype) for i in heads)
    return base.HeadWeights(split(self.w_in), split(self.b_in),
                            split(self.w_out), split(self.b_out),
                            base_first=False)

  @staticmethod
  def step(weights: base.HeadWeights, index: int, state: jax.Array,
           previous: jax.Array) -> jax.Array:
    """The state of head index + 2 from the state and token before it.

    Args:
      weights: from `weights`.
      index: 0-based head after head 1.
      state: [..., d_model] the previous head's state (the decoder output
        for the first).
      previous: [..., d_model] the embedding of the previous head's token.

    Returns:
      [..., d_model].
    """
    x = jnp.concatenate([state, previous.astype(state.dtype)], axis=-1)
    w_in = weights.w_in[index]
    hidden = jax.nn.relu(x.astype(w_in.dtype) @ w_in + weights.b_in[index])
    return state + hidden @ weights.w_out[index] + weights.b_out[index]

  def draft_tokens(self, view, choose, k):
    state = view.last_hidden
    previous = ops.take_at(view.next_tokens, view.last)
    proposals, logits = [], []
    for index in range(k - 1):
      state = self.step(view.weights, index, state, view.embed(previous))
      logits.append(view.project(state))
      previous = choose(index, logits[-1])
      proposals.append(previous)
    return jnp.stack(proposals, axis=1), jnp.stack(logits, axis=1), view.cache

  def draft_tree(self, view, grow, depth):
    root = ops.take_at(view.next_tokens, view.last)
    states = self.step(view.weights, 0, view.last_hidden,
                       view.embed(root))[:, None]
    for level in range(depth):
      tokens, parents = grow(level, view.project(states))
      if level + 1 < depth:
        states = self.step(
            view.weights, level + 1,
            jnp.take_along_axis(states, parents[..., None], axis=1),
            view.embed(tokens))
    return view.cache
