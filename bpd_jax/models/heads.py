"""The blockwise proposal head (Stern et al. 2018, section 6).

Head i (1-based) predicts the token i positions after the current one from
the decoder output h at that position: head_i(h) = h + FFN_i(h), followed by
the model's own (shared) vocabulary projection. Two layouts of the FFN:

- "joint", as in the paper: one hidden layer of size H * hidden shared by all
  H heads with a layer, and an output of size H * d_model, one slice a head.
- "independent": H separate feed-forward layers, d_model -> hidden ->
  d_model. At k=8 and Transformer-base sizes the joint layer holds ~75M
  weights, more than the decoder it sits on, and reading them every decoding
  step costs more than the step itself at batch 1; independent heads of the
  same hidden size read 1/H of that for the same proposal.

Head 1 is either the base model's own next-token output, untouched
(`head1_from_base=True`: verification is against the original model, and
training the heads on a frozen base keeps its quality exactly), or goes
through the new layer too, as in the original Tensor2Tensor code.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

HEAD_LAYERS = ('joint', 'independent')


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HeadWeights:
  """The weights of a run of consecutive heads, laid out to be applied.

  Decoding takes these once per decode, outside its loop (see
  `ProposalHeads.weights`), so that no call inside the loop slices or
  re-lays out parameters.

  Attributes:
    w_in: [d_model, hidden_total] input weights of the heads' hidden layer:
      the joint layer's whole hidden layer, or the independent heads' input
      weights side by side (one product for all heads instead of `count`).
    b_in: [hidden_total].
    w_out: [count, hidden, d_model] (independent: each head's own hidden
      slice) or [hidden_total, count, d_model] (joint).
    b_out: [count, d_model].
    base_first: static; the run starts with head 1 taken from the base
      model (the decoder output itself, no layer).
    joint: static; the layout is the joint layer's.
  """
  w_in: jax.Array | None
  b_in: jax.Array | None
  w_out: jax.Array | None
  b_out: jax.Array | None
  base_first: bool = dataclasses.field(metadata=dict(static=True))
  joint: bool = dataclasses.field(metadata=dict(static=True))


def apply_heads(weights: HeadWeights, h: jax.Array) -> jax.Array:
  """Head states from decoder outputs.

  Args:
    weights: the heads, from `ProposalHeads.weights`.
    h: [..., d_model] decoder outputs.

  Returns:
    [..., count, d_model].
  """
  states = [h[..., None, :]] if weights.base_first else []
  if weights.w_in is not None:
    hidden = jax.nn.relu(h.astype(weights.w_in.dtype) @ weights.w_in
                         + weights.b_in)
    if weights.joint:
      out = jnp.einsum('...f,fkd->...kd', hidden, weights.w_out)
    else:
      count, width = weights.w_out.shape[:2]
      hidden = hidden.reshape(hidden.shape[:-1] + (count, width))
      out = jnp.einsum('...kf,kfd->...kd', hidden, weights.w_out)
    states.append(h[..., None, :] + out + weights.b_out)
  return jnp.concatenate(states, axis=-2) if len(states) > 1 else states[0]


class ProposalHeads(nnx.Module):
  """Maps decoder outputs [..., d_model] to per-head states [..., heads, d_model].

  The states go through the model's vocabulary projection to give logits.
  """

  def __init__(self, d_model: int, num_heads: int, hidden: int, *,
               layer: str = 'independent', head1_from_base: bool = True,
               dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs):
    """Creates the head layer.

    Args:
      d_model: width of the decoder output.
      num_heads: k, the number of heads, head 1 included.
      hidden: hidden width of one head's feed-forward layer (the joint layer
        has num_heads_with_layer * hidden units in all).
      layer: 'joint' or 'independent'.
      head1_from_base: head 1 is the decoder output itself (no layer).
      dtype: computation dtype (None: from inputs and params).
      param_dtype: parameter dtype.
      rngs: initialisation randomness.
    """
    if layer not in HEAD_LAYERS:
      raise ValueError(f'head layer {layer!r} is not one of {HEAD_LAYERS}.')
    if num_heads < 1:
      raise ValueError(f'num_heads={num_heads} must be >= 1.')
    if hidden < 1:
      raise ValueError(f'head hidden size {hidden} must be >= 1.')
    self.num_heads = num_heads
    self.layer = layer
    self.head1_from_base = head1_from_base
    self.dtype = dtype
    # Heads that own a slice of the feed-forward layer.
    n = num_heads - 1 if head1_from_base else num_heads
    self.num_layer_heads = n
    init = nnx.initializers.lecun_normal()
    p = lambda *shape: nnx.Param(init(rngs.params(), shape, param_dtype))
    z = lambda *shape: nnx.Param(jnp.zeros(shape, param_dtype))
    if n == 0:
      return
    if layer == 'joint':
      self.w_in, self.b_in = p(d_model, n * hidden), z(n * hidden)
      self.w_out, self.b_out = p(n * hidden, n, d_model), z(n, d_model)
    else:
      self.w_in, self.b_in = p(n, d_model, hidden), z(n, hidden)
      self.w_out, self.b_out = p(n, hidden, d_model), z(n, d_model)

  def __call__(self, h: jax.Array, first: int, count: int) -> jax.Array:
    """States of heads first+1 .. first+count (1-based) from decoder outputs.

    Args:
      h: [..., d_model] decoder outputs.
      first: 0-based index of the first head wanted.
      count: number of consecutive heads wanted.

    Returns:
      [..., count, d_model].
    """
    return apply_heads(self.weights(first, count), h)

  def weights(self, first: int, count: int) -> HeadWeights:
    """The weights of heads first+1 .. first+count (1-based), laid out.

    Only the requested heads' weights are taken: verification needs head 1
    alone at k positions, the next proposal heads 2..k at one.
    """
    if not (0 <= first and count >= 1
            and first + count <= self.num_heads):
      raise ValueError(f'heads {first + 1}..{first + count} requested; the '
                       f'model has heads 1..{self.num_heads}.')
    # Heads that own a slice of the layer are numbered from 0 after skipping
    # head 1 when it is the decoder output itself.
    base_first = self.head1_from_base and first == 0
    if base_first:
      first, count = 1, count - 1
    first -= 1 if self.head1_from_base else 0
    if not count:
      return HeadWeights(None, None, None, None, base_first=True,
                         joint=self.layer == 'joint')
    heads = slice(first, first + count)
    dtype = self.dtype or self.w_in.dtype
    cast = lambda param: param.astype(dtype)
    if self.layer == 'joint':
      # All heads share the hidden layer; only their output slices are read.
      w_in, b_in = self.w_in[...], self.b_in[...]
      w_out = self.w_out[:, heads]
    else:
      w_in = self.w_in[heads]  # [count, d, hidden] -> [d, count * hidden]
      w_in = jnp.moveaxis(w_in, 0, 1).reshape(w_in.shape[1], -1)
      b_in = self.b_in[heads].reshape(-1)
      w_out = self.w_out[heads]
    return HeadWeights(cast(w_in), cast(b_in), cast(w_out),
                       cast(self.b_out[heads]), base_first=base_first,
                       joint=self.layer == 'joint')
