"""The position-wise feed-forward layers (TransformerConfig.feed_forward).

- 'plain': down(act(up(x))), the paper's Transformer and GPT-2.
- 'gated': down(act(gate(x)) * up(x)) (Shazeer 2020; SwiGLU with 'silu'),
  Llama, Mistral and Qwen2. The projections keep Hugging Face's names
  (gate_proj, up_proj, down_proj), each kernel its weight transposed.
"""

import functools

import jax
from flax import nnx

from bpd_jax.models import dropout as dropout_lib

# Activations of the feed-forward layers (`TransformerConfig.activation`).
# 'gelu' is the tanh approximation, GPT-2's "gelu_new"; 'silu' is x *
# sigmoid(x) (Llama's).
ACTIVATIONS = {
    'relu': jax.nn.relu,
    'gelu': functools.partial(jax.nn.gelu, approximate=True),
    'silu': jax.nn.silu,
}
FEED_FORWARDS = ('plain', 'gated')


class FeedForward(nnx.Module):
  """d_model -> d_ff (activation, gated or not) -> d_model."""

  def __init__(self, d_model: int, d_ff: int, *, kind: str = 'plain',
               activation: str = 'relu', use_bias: bool = True,
               dropout_rate: float = 0.0, dtype=None, param_dtype,
               rngs: nnx.Rngs):
    """Creates the layer.

    Args:
      d_model: input and output width.
      d_ff: hidden width.
      kind: one of FEED_FORWARDS.
      activation: one of ACTIVATIONS.
      use_bias: the projections have biases.
      dropout_rate: dropout on the hidden layer, in training only.
      dtype: computation dtype (None: from inputs and params).
      param_dtype: parameter dtype.
      rngs: initialisation randomness.
    """
    linear = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,
                  rngs=rngs)
    if kind == 'gated':
      self.gate = nnx.Linear(d_model, d_ff, **linear)
    self.up = nnx.Linear(d_model, d_ff, **linear)
    self.down = nnx.Linear(d_ff, d_model, **linear)
    self.dropout = nnx.Dropout(dropout_rate)
    self.activation = activation
    self.gated = kind == 'gated'

  def __call__(self, x: jax.Array, dropout_rngs: nnx.Rngs | None
               ) -> jax.Array:
    """[..., d_model] -> [..., d_model]; dropout_rngs None: no dropout."""
    activation = ACTIVATIONS[self.activation]
    if self.gated:
      hidden = activation(self.gate(x)) * self.up(x)
    else:
      hidden = activation(self.up(x))
    return self.down(dropout_lib.apply(self.dropout, hidden, dropout_rngs))
