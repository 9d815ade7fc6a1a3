"""The paper's proposal heads (Stern et al. 2018, section 6).

Head i (1-based) predicts the token i positions after the current one from
the decoder output h at that position: head_i(h) = h + FFN_i(h), followed by
the model's own (shared) vocabulary projection. Two layouts of the FFN:

- "joint" (`JointHeads`), as in the paper: one hidden layer of size
  H * hidden shared by all H heads with a layer, and an output of size
  H * d_model, one slice a head.
- "independent" (`IndependentHeads`): H separate feed-forward layers,
  d_model -> hidden -> d_model. At k=8 and Transformer-base sizes the
  joint layer holds ~75M weights, more than the decoder it sits on, and
  reading them every decoding step costs more than the step itself at
  batch 1; independent heads of the same hidden size read 1/H of that for
  the same proposal.

Head 1 is either the base model's own next-token output, untouched
(`head1_from_base=True`: verification is against the original model, and
training the heads on a frozen base keeps its quality exactly), or goes
through the layer too, as in the original Tensor2Tensor code. The heads
read one position each, so all k - 1 proposals come from one pass.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.models.drafters import base

T = 'model'  # The mesh axis the 'tensor' rules split over.


class _PaperHeads(base.Drafter):
  """Feed-forward heads on one position: the two layouts' shared steps.

  Heads that own a slice of the layer are numbered from 0 after head 1
  when head 1 is the decoder output itself (`num_layer_heads` of them).
  """
  head1_through_layer = True
  joint = False  # The layout (overridden by JointHeads).

  def __init__(self, config, *, rngs: nnx.Rngs):
    self.num_heads = config.num_proposal_heads
    self.head1_from_base = config.head1_from_base
    self.dtype = jnp.dtype(config.dtype)
    n = self.num_heads - (1 if self.head1_from_base else 0)
    self.num_layer_heads = n
    if n == 0:
      return
    d_model, hidden = config.d_model, config.head_hidden or config.d_ff
    p, z = base.parameter_makers(config, rngs)
    if self.joint:
      self.w_in, self.b_in = p(d_model, n * hidden), z(n * hidden)
      self.w_out, self.b_out = p(n * hidden, n, d_model), z(n, d_model)
    else:
      self.w_in, self.b_in = p(n, d_model, hidden), z(n, hidden)
      self.w_out, self.b_out = p(n, hidden, d_model), z(n, d_model)

  def states(self, view, first, count, rows=None):
    if rows is not None:
      view = view.at_rows(rows)
    return self.apply(self.head_weights(first, count), view.hidden)

  def scoring_weights(self, dtype):
    del dtype
    return None if self.head1_from_base else self.head_weights(0, 1)

  def weights(self, k, dtype):
    del dtype
    return self.head_weights(1, k - 1)

  def proposal_states(self, view, k):
    del k
    return self.apply(view.weights, view.last_hidden), view.cache

  def head_weights(self, first: int, count: int) -> base.HeadWeights:
    """Heads first+1 .. first+count (1-based), laid out to be applied.

    Only the requested heads' weights are taken: verification needs head
    1 alone at k positions, the next proposal heads 2..k at one.
    """
    if not (0 <= first and count >= 1 and first + count <= self.num_heads):
      raise ValueError(f'heads {first + 1}..{first + count} requested; the '
                       f'model has heads 1..{self.num_heads}.')
    base_first = self.head1_from_base and first == 0
    if base_first:
      first, count = 1, count - 1
    first -= 1 if self.head1_from_base else 0
    if not count:
      return base.HeadWeights(None, None, None, None, base_first=True)
    return self._layout(slice(first, first + count), base_first)

  def apply(self, weights: base.HeadWeights, h: jax.Array) -> jax.Array:
    """Head states [..., count, d_model] from decoder outputs
    [..., d_model]."""
    states = [h[..., None, :]] if weights.base_first else []
    if weights.w_in is not None:
      hidden = jax.nn.relu(h.astype(weights.w_in.dtype) @ weights.w_in
                           + weights.b_in)
      states.append(h[..., None, :] + self._outputs(hidden, weights)
                    + weights.b_out)
    return jnp.concatenate(states, axis=-2) if len(states) > 1 else states[0]

  def _cast(self, param) -> jax.Array:
    return param.astype(self.dtype or param.dtype)


class IndependentHeads(_PaperHeads):
  """H separate feed-forward layers, one a head.

  Decoding weights: w_in [d_model, hidden * count] the heads' input
  weights interleaved by hidden unit (column u * count + i is head i's
  unit u: one product for all heads instead of `count`, and a split of
  the columns over devices gives each the same units of every head, those
  its slice of w_out holds), b_in [hidden * count], w_out [count, hidden,
  d_model], b_out [count, d_model].
  """
  tensor_rules = (
      (r'(w_in|b_in)', (..., T)),  # By hidden unit.
      (r'w_out', (..., T, None)),  # [heads, hidden, d_model]: by unit.
  )

  def _layout(self, heads: slice, base_first: bool) -> base.HeadWeights:
    # [count, d, hidden] -> [d, hidden * count], by unit then head.
    w_in = self.w_in[heads]
    w_in = jnp.transpose(w_in, (1, 2, 0)).reshape(w_in.shape[1], -1)
    b_in = self.b_in[heads].T.reshape(-1)
    return base.HeadWeights(self._cast(w_in), self._cast(b_in),
                            self._cast(self.w_out[heads]),
                            self._cast(self.b_out[heads]),
                            base_first=base_first)

  @staticmethod
  def _outputs(hidden, weights):
    count, width = weights.w_out.shape[:2]
    hidden = hidden.reshape(hidden.shape[:-1] + (width, count))
    return jnp.einsum('...fk,kfd->...kd', hidden, weights.w_out)


class JointHeads(_PaperHeads):
  """The paper's layout: one hidden layer of num_layer_heads * hidden
  units shared by every head, an output slice a head.

  Decoding weights: w_in [d_model, hidden_total] and b_in [hidden_total]
  whole (every head reads every unit), w_out [hidden_total, count,
  d_model] the heads' output slices, b_out [count, d_model].
  """
  joint = True
  tensor_rules = (
      (r'(w_in|b_in)', (..., T)),  # By hidden unit.
      # [hidden_total, heads, d_model]: by hidden unit, as w_in, so each
      # device holds the output weights of its own units (its k - 1 axis
      # never divides 2, 4 or 8 devices for an even k).
      (r'w_out', (T, None, None)),
  )

  def _layout(self, heads: slice, base_first: bool) -> base.HeadWeights:
    # All heads share the hidden layer; only their output slices are read.
    return base.HeadWeights(self._cast(self.w_in[...]),
                            self._cast(self.b_in[...]),
                            self._cast(self.w_out[:, heads]),
                            self._cast(self.b_out[heads]),
                            base_first=base_first)

  @staticmethod
  def _outputs(hidden, weights):
    return jnp.einsum('...f,fkd->...kd', hidden, weights.w_out)
