"""Why two decodes differ: floating-point near-ties of the scoring model.

Exact blockwise decoding scores k positions in one call where greedy
decoding scores one; the two products are summed in different orders, so
their logits agree only to rounding. Where the scoring model's two best
tokens are that close, either decoder may pick either. A difference is
explained when, at its first differing token, the top-2 margin of the
scoring model (recomputed by one full forward pass over the common prefix)
is within rounding of zero.
"""

import jax.numpy as jnp
import numpy as np
from flax import nnx

# Relative size of a rounding difference in float32 logits after a few
# layers: margins below this times the logits' scale count as near-ties.
RELATIVE_TOLERANCE = 1e-4


def scoring_logits(model, inputs: np.ndarray, prefix,
                   length: int | None = None) -> np.ndarray:
  """Head 1's logits [vocab] after `prefix`, by one full forward pass.

  Args:
    model: the Transformer.
    inputs: [length] one example's source (encoder-decoder) or prompt,
      right-padded.
    prefix: generated tokens before the position.
    length: the decoder input is padded to this many tokens (None: not
      padded). Attention is causal, so the padding leaves the position's
      logits as they are; one length serves every prefix with one compiled
      pass instead of one per prefix length.
  """
  config = model.config
  inputs = np.asarray(inputs)
  if config.is_encoder_decoder:
    source = jnp.asarray(inputs[None])
    decoder_input = [config.bos_id, *prefix]
  else:
    source = None
    decoder_input = [*inputs[inputs != config.pad_id], *prefix]
  position = len(decoder_input) - 1
  if length is not None:
    if length < len(decoder_input):
      raise ValueError(f'length={length} is shorter than the decoder input '
                       f'({len(decoder_input)} tokens).')
    decoder_input += [config.pad_id] * (length - len(decoder_input))
  return np.asarray(_logits_at(model, source,
                               jnp.asarray([decoder_input], jnp.int32),
                               jnp.int32(position)))


@nnx.jit
def _logits_at(model, source, decoder_input, position):
  """[vocab] head-1 logits at `position` of a one-example forward pass."""
  hidden = model(source, decoder_input)
  return model.next_token_logits(hidden[0, position])


def top2_margin(model, inputs: np.ndarray, prefix,
                length: int | None = None) -> float:
  """Gap between the scoring model's two best next tokens after `prefix`.

  Arguments as `scoring_logits`. Returns the top-2 margin divided by
  max(1, largest |logit|).
  """
  logits = np.sort(scoring_logits(model, inputs, prefix, length))
  return float((logits[-1] - logits[-2]) / max(1.0, np.abs(logits).max()))


def count_differences(model, inputs: np.ndarray, reference: np.ndarray,
                      tokens: np.ndarray) -> tuple[int, int]:
  """(examples that differ, of them those explained by a near-tie).

  Args:
    model: the Transformer that decoded.
    inputs: [examples, length] the decoded inputs.
    reference: [examples, max_len] greedy decoding's tokens.
    tokens: [examples, max_len] the other decoder's tokens.
  """
  differ = np.flatnonzero((reference != tokens).any(axis=1))
  # Every prefix padded to the longest decoder input: one compiled pass.
  length = reference.shape[1] + (
      1 if model.config.is_encoder_decoder else inputs.shape[1])
  ties = 0
  for i in differ:
    j = int(np.argmax(reference[i] != tokens[i]))
    ties += top2_margin(model, inputs[i], reference[i, :j], length) < (
        RELATIVE_TOLERANCE)
  return len(differ), ties
