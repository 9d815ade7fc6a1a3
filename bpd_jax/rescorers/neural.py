"""A small decoder-only Transformer as the refinement's neural rescorer.

The language model reads a fixed window of the preceding output (Kim et al.
2024's local neural rescoring; `bpd_jax.drafts.lm` builds and trains one).
Inside the compiled decode its structure is static and its weights are
arguments, as the decoded model's own are (`generate.Decoder`).
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.models.transformer import Transformer


def bind(refinement, model: Transformer, *, vocab_size: int, start_id: int):
  """The neural rescorer's part of a decode (see `rescorers.bind`)."""
  if not isinstance(model, Transformer) or model.config.is_encoder_decoder:
    raise ValueError("rescorer 'neural' needs a decoder-only Transformer "
                     "(bpd_jax.drafts.lm).")
  config = model.config
  if config.vocab_size != vocab_size:
    raise ValueError(f'the rescoring LM has a vocabulary of '
                     f'{config.vocab_size}, the decoded model {vocab_size}.')
  if refinement.context > config.max_target_len:
    raise ValueError(f'the rescoring window of {refinement.context} tokens '
                     f"exceeds the LM's max_target_len="
                     f'{config.max_target_len}.')
  graphdef, weights = nnx.split(model)
  leaves, treedef = jax.tree_util.tree_flatten(weights)
  return (dataclasses.replace(refinement, start_id=start_id), leaves,
          (graphdef, treedef))


def function(structure, arguments):
  """tokens [rows, window] -> [rows, vocab] next-token log probabilities."""
  graphdef, treedef = structure
  lm = nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, arguments))

  def next_token_log_probs(tokens):
    hidden = lm(None, tokens)[:, -1]
    return jax.nn.log_softmax(lm.logits(hidden).astype(jnp.float32))
  return next_token_log_probs
