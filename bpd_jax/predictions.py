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

from bpd_jax.models.transformer import Transformer
from bpd_jax.training import losses


def head_predictions(model: Transformer, sources: np.ndarray,
                     outputs: np.ndarray, *, heads: int, top_t: int,
                     batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
  """Every head's top-t tokens and confidence at every output position.

  Args:
    model: a Transformer with >= `heads` proposal heads.
    sources: [batch, source_length] right-padded sources (an
      encoder-decoder's), or prompts (a decoder-only model's, bos first).
    outputs: [batch, length] the model's greedy outputs (pad after eos).
    heads: K, heads read (1 = the scoring model).
    top_t: tokens kept per head.
    batch_size: rows a forward pass.

  Returns:
    (top [batch, length, K, t] token ids, best first; confidence
    [batch, length, K] max softmax probability).
  """
  parts = [_predict(model, jnp.asarray(sources[start:start + batch_size]),
                    jnp.asarray(outputs[start:start + batch_size]), heads,
                    top_t) for start in range(0, len(outputs), batch_size)]
  return tuple(np.concatenate([np.asarray(part[i]) for part in parts])
               for i in range(2))


@functools.partial(jax.jit, static_argnames=('heads', 'top_t'))
def _predict(model, sources, outputs, heads, top_t):
  config = model.config
  if config.is_encoder_decoder:
    decoder_input = losses.shift_right(outputs, config.bos_id)
    # Heads that read earlier proposals are fed the greedy tokens: the
    # drafts a decoder sees up to a draft's first miss, all acceptance reads.
    next_tokens = losses.shifted_targets(outputs, 0, max(heads - 1, 1),
                                         config.pad_id)
    logits = model.head_logits(model.run(sources, decoder_input), 0, heads,
                               next_tokens)
  else:
    # The prompt, then the outputs; output i is predicted at the position
    # before it, prompt length - 1 + i. The heads run over the whole
    # sequence (a draft layer attends to the prompt's entries too).
    tokens, _ = losses.decoder_only_sequence(sources, outputs, config.pad_id)
    next_tokens = losses.shifted_targets(tokens, 1, max(heads - 1, 1),
                                         config.pad_id)
    states = model.head_states(model.run(None, tokens), 0, heads,
                               next_tokens)
    prompt_lengths = (sources != config.pad_id).sum(1, keepdims=True)
    positions = prompt_lengths - 1 + jnp.arange(outputs.shape[1])[None]
    # Only the outputs' positions go through the vocabulary projection.
    logits = model.logits(jnp.take_along_axis(
        states, positions[..., None, None], axis=1))
  probs = jax.nn.softmax(logits)
  confidence, top = jax.lax.top_k(probs, top_t)
  return top, confidence[..., 0]


def head_accuracy(model: Transformer, sources: np.ndarray,
                  outputs: np.ndarray, lengths: np.ndarray, *,
                  heads: int) -> list[float]:
  """Teacher-forced top-1 accuracy of each head on given outputs.

  On the greedy outputs this is what acceptance depends on: head h + 1
  at position i is right when its best token is greedy's token i + h
  (head 1, the base on its own outputs, is right everywhere). On the
  references it is the true-token accuracy training logs report.

  Args:
    model: a Transformer with >= `heads` proposal heads.
    sources: [batch, source_length] as `head_predictions` takes them.
    outputs: [batch, length] the outputs (pad after the end).
    lengths: [batch] their lengths.
    heads: K, heads read.

  Returns:
    `top1_accuracy` of the heads' predictions on them.
  """
  top = head_predictions(model, sources, outputs, heads=heads, top_t=1)[0]
  return top1_accuracy(top, outputs, lengths)


def top1_accuracy(top: np.ndarray, outputs: np.ndarray,
                  lengths: np.ndarray) -> list[float]:
  """K accuracies: how often head h + 1's best token (top [batch, length,
  K, >= 1] from `head_predictions`) is outputs' token i + h, over every
  position i where the output has it (nan where none has)."""
  target, valid = targets(outputs, lengths, top.shape[2])
  right = (top[..., 0] == target) & valid
  return [round(float(r) / float(c), 4) if c else float('nan')
          for r, c in zip(right.sum((0, 1)), valid.sum((0, 1)))]


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
