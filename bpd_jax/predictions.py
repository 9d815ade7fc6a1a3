"""What the heads propose at every position of given outputs, teacher-forced.

One full forward pass over bos + output gives, at every output position i,
every head's distribution, exactly the ones the blockwise decoder sees when
its last accepted token is the output's token i (head h predicts token
i + h - 1). The draft analysis (`bpd_jax.drafts`) and the tuning of trees
(`auto_k.tune_k`) read them.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax import losses
from bpd_jax.models.transformer import Transformer


def head_predictions(model: Transformer, sources: np.ndarray,
                     outputs: np.ndarray, *, heads: int,
                     top_t: int) -> tuple[np.ndarray, np.ndarray]:
  """Every head's top-t tokens and confidence at every output position.

  Args:
    model: a Transformer with >= `heads` proposal heads.
    sources: [batch, source_length] right-padded sources (an
      encoder-decoder's), or prompts (a decoder-only model's, bos first).
    outputs: [batch, length] the model's greedy outputs (pad after eos).
    heads: K, heads read (1 = the scoring model).
    top_t: tokens kept per head.

  Returns:
    (top [batch, length, K, t] token ids, best first; confidence
    [batch, length, K] max softmax probability).
  """
  return _predict(model, jnp.asarray(sources), jnp.asarray(outputs),
                  heads, top_t)


@functools.partial(jax.jit, static_argnames=('heads', 'top_t'))
def _predict(model, sources, outputs, heads, top_t):
  config = model.config
  if config.is_encoder_decoder:
    decoder_input = jnp.concatenate(
        [jnp.full((outputs.shape[0], 1), config.bos_id, outputs.dtype),
         outputs[:, :-1]], axis=1)
    hidden = model(sources, decoder_input)
  else:
    # The prompt, then the outputs; output i is predicted at the position
    # before it, prompt length - 1 + i.
    tokens, _ = losses.decoder_only_sequence(sources, outputs, config.pad_id)
    prompt_lengths = (sources != config.pad_id).sum(1, keepdims=True)
    positions = prompt_lengths - 1 + jnp.arange(outputs.shape[1])[None]
    hidden = jnp.take_along_axis(model(None, tokens), positions[..., None],
                                 axis=1)
  # Heads that read earlier proposals are fed the greedy tokens: the drafts
  # a decoder sees up to a draft's first miss, all that acceptance reads.
  next_tokens = losses.shifted_targets(outputs, 0, max(heads - 1, 1),
                                       config.pad_id)
  logits = model.head_logits(hidden, 0, heads, next_tokens)
  probs = jax.nn.softmax(logits)
  confidence, top = jax.lax.top_k(probs, top_t)
  return top, confidence[..., 0]


def targets(outputs: np.ndarray, lengths: np.ndarray,
            heads: int) -> tuple[np.ndarray, np.ndarray]:
  """(target [batch, length, K], valid [batch, length, K]): the token head
  h + 1 should propose at position i, outputs[i + h], and whether the
  output has it."""
  batch, length = outputs.shape
  position = np.arange(length)[:, None] + np.arange(heads)[None, :]
  target = np.take_along_axis(
      np.pad(outputs, ((0, 0), (0, heads))),
      position.reshape(1, -1).repeat(batch, 0), axis=1).reshape(
          batch, length, heads)
  return target, position[None] < lengths[:, None, None]


def rank_probabilities(top: np.ndarray, outputs: np.ndarray,
                       lengths: np.ndarray) -> np.ndarray:
  """[K - 1, t]: how often head j + 2's rank-r token is the right one
  where the heads before it all hold theirs in their top t (the path
  above it can be right), over every output position.

  Args:
    top: [batch, length, K, t] from `head_predictions`.
    outputs: [batch, length] the greedy outputs.
    lengths: [batch] their lengths.
  """
  heads, t = top.shape[2:]
  target, valid = targets(outputs, lengths, heads)
  hit = top == target[..., None]  # [batch, length, K, t]
  within = hit.any(-1)
  probabilities = np.zeros((heads - 1, t))
  above = valid[..., 0]  # Heads 2..h all hold their token so far.
  for h in range(1, heads):
    where = above & valid[..., h]
    if where.any():
      probabilities[h - 1] = hit[..., h, :][where].mean(axis=0)
    above = where & within[..., h]
  return probabilities
