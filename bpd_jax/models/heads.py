"""The blockwise proposal heads (Stern et al. 2018, section 6, and beyond).

Head i (1-based) predicts the token i positions after the current one from
the decoder output h at that position: head_i(h) = h + FFN_i(h), followed by
the model's own (shared) vocabulary projection. Two layouts of the paper's
FFN:

- "joint", as in the paper: one hidden layer of size H * hidden shared by all
  H heads with a layer, and an output of size H * d_model, one slice a head.
- "independent": H separate feed-forward layers, d_model -> hidden ->
  d_model. At k=8 and Transformer-base sizes the joint layer holds ~75M
  weights, more than the decoder it sits on, and reading them every decoding
  step costs more than the step itself at batch 1; independent heads of the
  same hidden size read 1/H of that for the same proposal.

Heads that see each other's proposals ("sequential", after Hydra): head i
reads the state of head i - 1 and the embedding of the token head i - 1
proposed, s_i = s_{i-1} + FFN_i([s_{i-1}; e(x_{i-1})]) with s_1 = h, so
head 2 knows head 1's token and each later head every earlier proposal
(through the chain of states). Drafts are then made one head after another
(`sequential_step`); training feeds the true tokens (teacher forcing).
Head 1 is the base model's output here.

An autoregressive draft layer ("autoregressive", after EAGLE; see
models/draft_layer.py): one small decoder layer with its own cache drafts
heads 2..k one after another from the base's features and the tokens so
far; head i is its (i - 1)-th drafting step, trained unrolled as decoding
runs it.

Head 1 is either the base model's own next-token output, untouched
(`head1_from_base=True`: verification is against the original model, and
training the heads on a frozen base keeps its quality exactly), or goes
through the new layer too, as in the original Tensor2Tensor code.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.models import draft_layer as draft_layer_lib

HEAD_LAYERS = ('joint', 'independent', 'sequential', 'autoregressive')
# Head layers whose heads read earlier heads' proposals: their drafts are
# made head after head, and the top-t lattice of draft refinement does not
# describe them.
DEPENDENT_HEAD_LAYERS = ('sequential', 'autoregressive')


def dependent(layer: str) -> str:
  """`layer` if its heads read each other's proposals, else ''."""
  return layer if layer in DEPENDENT_HEAD_LAYERS else ''


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
      weights interleaved by hidden unit (column u * count + i is head i's
      unit u: one product for all heads instead of `count`, and a split of
      the columns over devices gives each the same units of every head,
      those its slice of w_out holds); sequential heads: a tuple of `count`
      arrays [2 * d_model, hidden], each head's own.
    b_in: [hidden_total] (sequential: `count` arrays [hidden]).
    w_out: [count, hidden, d_model] (independent: each head's own hidden
      slice), [hidden_total, count, d_model] (joint), or `count` arrays
      [hidden, d_model] (sequential).
    b_out: [count, d_model] (sequential: `count` arrays [d_model]).
    base_first: static; the run starts with head 1 taken from the base
      model (the decoder output itself, no layer).
    joint: static; the layout is the joint layer's.
    dependent: static; the heads read earlier heads' proposals
      (`sequential_step`, the draft layer), `apply_heads` does not serve
      them.
  """
  w_in: jax.Array | tuple[jax.Array, ...] | None
  b_in: jax.Array | tuple[jax.Array, ...] | None
  w_out: jax.Array | tuple[jax.Array, ...] | None
  b_out: jax.Array | tuple[jax.Array, ...] | None
  base_first: bool = dataclasses.field(metadata=dict(static=True))
  joint: bool = dataclasses.field(metadata=dict(static=True))
  dependent: bool = dataclasses.field(default=False,
                                      metadata=dict(static=True))


def apply_heads(weights: HeadWeights, h: jax.Array) -> jax.Array:
  """Head states from decoder outputs.

  Args:
    weights: the heads, from `ProposalHeads.weights`.
    h: [..., d_model] decoder outputs.

  Returns:
    [..., count, d_model].
  """
  if weights.dependent and (weights.w_in is not None
                             or not weights.base_first):
    raise ValueError('sequential heads read the tokens earlier heads '
                     'proposed: use sequential_step (or sequential_states).')
  states = [h[..., None, :]] if weights.base_first else []
  if weights.w_in is not None:
    hidden = jax.nn.relu(h.astype(weights.w_in.dtype) @ weights.w_in
                         + weights.b_in)
    if weights.joint:
      out = jnp.einsum('...f,fkd->...kd', hidden, weights.w_out)
    else:
      count, width = weights.w_out.shape[:2]
      hidden = hidden.reshape(hidden.shape[:-1] + (width, count))
      out = jnp.einsum('...fk,kfd->...kd', hidden, weights.w_out)
    states.append(h[..., None, :] + out + weights.b_out)
  return jnp.concatenate(states, axis=-2) if len(states) > 1 else states[0]


def sequential_step(weights: HeadWeights, index: int, state: jax.Array,
                    previous: jax.Array) -> jax.Array:
  """The state of one sequential head from the state and token before it.

  Args:
    weights: sequential heads' weights (`ProposalHeads.weights`).
    index: 0-based head within `weights` (not counting a base-first head 1).
    state: [..., d_model] the previous head's state (the decoder output for
      the first layer head).
    previous: [..., d_model] the embedding of the previous head's token.

  Returns:
    [..., d_model].
  """
  x = jnp.concatenate([state, previous.astype(state.dtype)], axis=-1)
  w_in = weights.w_in[index]
  hidden = jax.nn.relu(x.astype(w_in.dtype) @ w_in + weights.b_in[index])
  return state + hidden @ weights.w_out[index] + weights.b_out[index]


def sequential_states(weights: HeadWeights, h: jax.Array,
                      previous: jax.Array, feed=None) -> jax.Array:
  """Head states of a run of sequential heads from head 1 on, every
  earlier head fed the given tokens (teacher forcing) or its own.

  Args:
    weights: from `ProposalHeads.weights(0, count)`.
    h: [..., d_model] decoder outputs (head 1's state).
    previous: [..., count - 1, d_model] embeddings of the tokens heads
      1 .. count - 1 are taken to have proposed.
    feed: the training-time test: (index >= 1, state of head index + 1)
      -> [..., d_model] the embedding head index + 2 reads in place of
      previous[..., index, :] (e.g. of that state's argmax token). Head 2
      always reads previous[..., 0, :]: head 1's token is the base's,
      always accepted, so part of the prefix (the data, in training).
      None: previous throughout.

  Returns:
    [..., count, d_model].
  """
  states = [h]
  for index in range(previous.shape[-2]):
    token = (previous[..., index, :] if feed is None or index == 0
             else feed(index, states[-1]))
    states.append(sequential_step(weights, index, states[-1], token))
  return jnp.stack(states, axis=-2)


class ProposalHeads(nnx.Module):
  """Maps decoder outputs [..., d_model] to per-head states [..., heads, d_model].

  The states go through the model's vocabulary projection to give logits.
  """

  def __init__(self, d_model: int, num_heads: int, hidden: int, *,
               layer: str = 'independent', head1_from_base: bool = True,
               attention_heads: int = 1,
               attention_head_dim: int | None = None,
               source_kv_heads: int | None = None, draft_source: str = 'none',
               draft_extra_features: int = 0, dtype=None,
               param_dtype=jnp.float32, rngs: nnx.Rngs):
    """Creates the head layer.

    Args:
      d_model: width of the decoder output.
      num_heads: k, the number of heads, head 1 included.
      hidden: hidden width of one head's feed-forward layer (the joint layer
        has num_heads_with_layer * hidden units in all).
      layer: one of HEAD_LAYERS.
      head1_from_base: head 1 is the decoder output itself (no layer);
        sequential heads and the draft layer need it.
      attention_heads: the autoregressive draft layer's attention heads.
      attention_head_dim: the width of each (None: d_model //
        attention_heads).
      source_kv_heads: the key/value heads of the base's source memory
        that draft_source 'base' attends to (None: attention_heads).
      draft_source: where the draft layer reads the source
        (draft_layer.DRAFT_SOURCES).
      draft_extra_features: lower decoder layers the draft layer reads
        beside the top one.
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
    if layer in DEPENDENT_HEAD_LAYERS and not head1_from_base:
      raise ValueError(f'{layer} heads start from the base model\'s own '
                       'next token: head1_from_base must be True.')
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
    elif layer == 'autoregressive':
      # One layer drafts every head after head 1.
      self.draft = draft_layer_lib.DraftLayer(
          d_model, attention_heads, hidden, head_dim=attention_head_dim,
          source_kv_heads=source_kv_heads, source=draft_source,
          extra_features=draft_extra_features, dtype=dtype,
          param_dtype=param_dtype, rngs=rngs)
    elif layer == 'sequential':
      self.w_in, self.b_in = p(n, 2 * d_model, hidden), z(n, hidden)
      self.w_out, self.b_out = p(n, hidden, d_model), z(n, d_model)
    else:
      self.w_in, self.b_in = p(n, d_model, hidden), z(n, hidden)
      self.w_out, self.b_out = p(n, hidden, d_model), z(n, d_model)

  def __call__(self, h: jax.Array, first: int, count: int,
               previous: jax.Array | None = None, *,
               features: jax.Array | None = None,
               source: draft_layer_lib.DraftSource | None = None,
               feed=None) -> jax.Array:
    """States of heads first+1 .. first+count (1-based) from decoder outputs.

    Args:
      h: [..., d_model] decoder outputs.
      first: 0-based index of the first head wanted.
      count: number of consecutive heads wanted.
      previous: dependent heads only: [..., first + count - 1, d_model]
        embeddings of the tokens heads 1 .. first + count - 1 are taken to
        have proposed (in training the true ones).
      features: the draft layer's: [..., (1 + extra) * d_model] the base's
        features, top first (None: h).
      source: the draft layer's view of the source, if it reads one.
      feed: dependent heads: the training-time test's tokens (see
        `sequential_states`, `DraftLayer.unroll`); None: previous.

    Returns:
      [..., count, d_model].
    """
    if self.layer not in DEPENDENT_HEAD_LAYERS:
      return apply_heads(self.weights(first, count), h)
    needed = first + count - 1
    if self.layer == 'autoregressive':
      states = h[..., None, :]
      if needed:  # Heads 2..: the draft layer's steps 1..needed.
        if previous is None or previous.shape[-2] < needed:
          raise ValueError(
              f'the draft layer\'s heads {first + 1}..{first + count} need '
              f'the embeddings of {needed} earlier tokens, got '
              f'{None if previous is None else previous.shape}.')
        steps = self.draft.unroll(h if features is None else features,
                                  previous[..., :needed, :], source, feed)
        states = jnp.concatenate([states, steps], axis=-2)
      return states[..., first:, :]
    if previous is None or previous.shape[-2] < needed:
      raise ValueError(f'sequential heads {first + 1}..{first + count} need '
                       f'the embeddings of {needed} earlier tokens, got '
                       f'{None if previous is None else previous.shape}.')
    states = sequential_states(self.weights(0, first + count), h,
                               previous[..., :needed, :], feed)
    return states[..., first:, :]

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
                         joint=self.layer == 'joint',
                         dependent=self.layer in DEPENDENT_HEAD_LAYERS)
    if self.layer == 'autoregressive':
      # The draft layer is applied as a module (Transformer.draft).
      return HeadWeights(None, None, None, None, base_first=base_first,
                         joint=False, dependent=True)
    heads = slice(first, first + count)
    dtype = self.dtype or self.w_in.dtype
    cast = lambda param: param.astype(dtype)
    if self.layer == 'sequential':
      # Applied one head at a time: each head's own weights, split here
      # once. Indexing the stacked array inside the decode loop copied the
      # head's weights at every drafting step (k=8 loop: 665 -> 340 us).
      split = lambda param: tuple(cast(param[i])
                                  for i in range(heads.start, heads.stop))
      return HeadWeights(split(self.w_in), split(self.b_in),
                         split(self.w_out), split(self.b_out),
                         base_first=base_first, joint=False, dependent=True)
    if self.layer == 'joint':
      # All heads share the hidden layer; only their output slices are read.
      w_in, b_in = self.w_in[...], self.b_in[...]
      w_out = self.w_out[:, heads]
    else:
      # [count, d, hidden] -> [d, hidden * count], by unit then head.
      w_in = self.w_in[heads]
      w_in = jnp.transpose(w_in, (1, 2, 0)).reshape(w_in.shape[1], -1)
      b_in = self.b_in[heads].T.reshape(-1)
      w_out = self.w_out[heads]
    return HeadWeights(cast(w_in), cast(b_in), cast(w_out),
                       cast(self.b_out[heads]), base_first=base_first,
                       joint=self.layer == 'joint')
