"""A hand-written "model" with known greedy output, for decoder tests.

As in t5x's decoding tests, logits are fixed by rule rather than learned, so
the tests can assert exact tokens and call counts. The rule reads the whole
history through the cache (the sum of the tokens up to the position), so a
decoder that let a rejected proposal leak into the history, or fed a wrong
position, would produce different tokens.

Vocabulary: 0 pad, 1 eos, 2 .. VOCAB - 1 ordinary tokens.
"""

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax.decoding import DecodingFns
from bpd_jax.infra import ops

VOCAB = 16
PAD, EOS = 0, 1


def gold(history_sum, position, eos_position):
  """The scoring model's token after `position` (works on ints and arrays)."""
  token = (history_sum * 5 + position * 3) % (VOCAB - 2) + 2
  xp = jnp if isinstance(token, jax.Array) else np
  return xp.where(position + 1 >= eos_position, EOS, token)


def runner_up(token):
  """The second-best token of the fake logits: the next ordinary id."""
  return (token - 1) % (VOCAB - 2) + 2


def head_proposal(mode, head, token):
  """What head `head` (2..k) proposes when the right token is `token`.

  Modes: 'oracle' (always right), 'wrong' (always the runner-up),
  ('right_first', r) (heads 2..r+1 right, the rest wrong).
  """
  if mode == 'oracle':
    return token
  if mode == 'wrong':
    return runner_up(token)
  _, right = mode
  return token if head - 1 <= right else runner_up(token)


def make_fns(mode, k):
  """DecodingFns of the fake model with heads in `mode`."""

  def extend(cache, tokens, start):
    history = ops.write_at(cache['history'], tokens, start)
    positions = start[:, None] + jnp.arange(tokens.shape[1])  # [b, n]
    visible = (jnp.arange(history.shape[1])[None, None, :]
               <= positions[:, :, None])
    history_sum = (history[:, None, :] * visible).sum(-1)
    eos_position = jnp.broadcast_to(cache['eos_position'][:, None],
                                    positions.shape)
    features = jnp.stack([history_sum, positions, eos_position], axis=-1)
    return features, dict(cache, history=history)

  def logits_of(token):
    # Best: token (score 2); runner-up (score 1), so top-2 accepts it.
    return (2.0 * jax.nn.one_hot(token, VOCAB)
            + jax.nn.one_hot(runner_up(token), VOCAB))

  def next_token_logits(features):
    return logits_of(gold(features[..., 0], features[..., 1],
                          features[..., 2]))

  def proposal_logits(cache, features, next_tokens, start, last):
    del next_tokens, start
    features = ops.take_at(features, last)
    history_sum, position, eos_position = (features[..., 0], features[..., 1],
                                           features[..., 2])
    token = gold(history_sum, position, eos_position)
    proposals = []
    for head in range(2, k + 1):
      history_sum = history_sum + token
      position = position + 1
      token = gold(history_sum, position, eos_position)
      proposals.append(head_proposal(mode, head, token))
    return logits_of(jnp.stack(proposals, axis=1)), cache

  def extend_tree(cache, tokens, start, depths, ancestors):
    # Node i's history: the committed tokens before the root, then its path.
    history = ops.write_at(cache['history'], tokens, start)
    committed = jnp.arange(history.shape[1])[None, :] < start[:, None]
    history_sum = ((history * committed).sum(-1)[:, None]
                   + (ancestors * tokens[:, None, :]).sum(-1))
    positions = start[:, None] + depths
    eos_position = jnp.broadcast_to(cache['eos_position'][:, None],
                                    positions.shape)
    features = jnp.stack([history_sum, positions, eos_position], axis=-1)
    return features, dict(cache, history=history)

  def commit(cache, start, nodes):
    history = cache['history']
    path = jnp.take_along_axis(history, start[:, None] + nodes, axis=1)
    return dict(cache, history=ops.write_at(history, path, start))

  return DecodingFns(extend, next_token_logits, proposal_logits,
                     extend_tree=extend_tree, commit=commit)


def make_cache(batch, positions, eos_position):
  return dict(history=jnp.zeros((batch, positions), jnp.int32),
              eos_position=jnp.asarray(eos_position, jnp.int32))


def reference_greedy(prompt, eos_position, max_len):
  """Plain-Python greedy decoding of one example."""
  history = list(prompt)
  out = []
  while len(out) < max_len:
    token = int(gold(sum(history), len(history) - 1, eos_position))
    out.append(token)
    history.append(token)
    if token == EOS:
      break
  return out


def reference_blockwise(prompt, eos_position, max_len, k, mode, accepts,
                        min_block=1):
  """Plain-Python blockwise decoding of one example, for comparison.

  Args:
    accepts: (proposal, best, runner_up) -> bool, the criterion.

  Returns:
    (tokens, model calls, tokens appended by each call).
  """
  history = list(prompt)

  def continuation(hist, count):
    """The fake's greedy tokens after `hist`, and the heads' versions."""
    hist = list(hist)
    right = []
    for _ in range(count):
      right.append(int(gold(sum(hist), len(hist) - 1, eos_position)))
      hist.append(right[-1])
    return right

  # First call: head 1's token, and the proposals after it.
  first = continuation(history, 1)[0]
  out, appended = [first], [1]
  right = continuation(history, k)
  block = [first] + [int(head_proposal(mode, h, right[h - 1]))
                     for h in range(2, k + 1)]
  while out[-1] != EOS and len(out) < max_len:
    accepted = 0
    for j in range(1, k):  # Verify block[j] against the model after block[:j].
      best = continuation(history + block[:j], 1)[0]
      if accepted == j - 1 and (accepts(block[j], best, runner_up(best))
                                or j < min_block):
        accepted = j
    new = block[1:accepted + 1]
    new.append(continuation(history + block[:accepted + 1], 1)[0])
    # Truncate at eos and max_len.
    if EOS in new:
      new = new[:new.index(EOS) + 1]
    new = new[:max_len - len(out)]
    history = history + block[:accepted + 1]
    out += new
    appended.append(len(new))
    right = continuation(history, k)
    block = [right[0]] + [int(head_proposal(mode, h, right[h - 1]))
                          for h in range(2, k + 1)]
  return out, len(appended), appended
