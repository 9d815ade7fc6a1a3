"""The drafter protocol: what proposes heads 2..k's tokens after the base.

Head 1 is the base model's own next-token output (for the paper's heads,
optionally its own slice of their layer). A drafter makes heads 2..k: the
k - 1 tokens after head 1's, from the base's features. Every drafter is one
class behind this protocol (`Drafter`), in a file of its own under
models/drafters/, with an entry in the registry (`drafters.REGISTRY`). It
owns:

- its parameters: built from the `TransformerConfig` by its constructor,
  under the model's 'heads' path;
- its training states (`states`): every head's state at chosen positions
  of a full-sequence pass, teacher-forced, which the shared vocabulary
  projection turns into the logits the losses read, and any loss of its
  own (`auxiliary_loss`);
- its decoding weights (`weights`): parameters laid out once per block
  size, outside the decoding loop;
- its draft (`proposal_states` for a drafter that makes all k - 1 states
  in one pass, `draft_tokens` for one whose heads read the tokens earlier
  heads chose) and any cache of its own (`init_cache`), under the base cache's
  rule: entries past the accepted length are stale and never read;
- its partition rules (`tensor_rules`): how 'tensor' splits its
  parameters, decoding weights and cache over a 'model' mesh axis.

What it may read of the model (its token embedding, the source, lower
layers' features) and what the config must say for it is declared by
class attributes, checked once in `TransformerConfig`.
"""

import dataclasses
from typing import Callable, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models import attention

# Where a drafter that reads the source attends to it: nowhere, the base's
# top decoder layer's keys and values, or its own projection.
DRAFT_SOURCES = ('none', 'base', 'own')


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftSource:
  """The source as a drafter attends to it.

  Attributes:
    memory: keys and values, [batch, source_length, kv_heads, head_dim]
      (the base's key/value heads, or the drafter's own).
    valid: [batch, source_length] bool, False at source padding.
  """
  memory: attention.KVCache
  valid: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HeadWeights:
  """The weights of a run of feed-forward heads, laid out to be applied
  (the paper's heads, sequential heads): taken once per decode, outside
  its loop, so that no call inside the loop slices or lays out
  parameters. Each drafter documents its own layout of the arrays.

  Attributes:
    w_in, b_in, w_out, b_out: the heads' arrays (or tuples of them, one a
      head); None where the run has no head with a layer.
    base_first: static; the run starts with head 1 taken from the base
      model (the decoder output itself, no layer).
  """
  w_in: jax.Array | tuple[jax.Array, ...] | None
  b_in: jax.Array | tuple[jax.Array, ...] | None
  w_out: jax.Array | tuple[jax.Array, ...] | None
  b_out: jax.Array | tuple[jax.Array, ...] | None
  base_first: bool = dataclasses.field(metadata=dict(static=True))


def parameter_makers(config, rngs: nnx.Rngs):
  """(random, zeros): random(*shape) a LeCun-normal parameter, zeros(*shape)
  a zero one, in config.param_dtype (a feed-forward head's weights and
  biases)."""
  init = nnx.initializers.lecun_normal()
  dtype = jnp.dtype(config.param_dtype)
  return (lambda *shape: nnx.Param(init(rngs.params(), shape, dtype)),
          lambda *shape: nnx.Param(jnp.zeros(shape, dtype)))


@dataclasses.dataclass(frozen=True)
class TrainingView:
  """What a drafter reads of a full-sequence pass (training, analysis).

  Attributes:
    hidden: [batch, T, d_model] the base's top outputs (head 1's states).
    features: [batch, T, F] the base's features at each position: hidden,
      then the outputs of config.draft_feature_layers (F = (1 + m) *
      d_model); hidden itself when there are none.
    source: the drafter's view of the source, or None.
    next_tokens: [batch, T, m] the tokens after each position:
      next_tokens[:, t, j] is the token j + 1 positions after t (head
      j + 1's label), what heads 1..m are taken to have proposed
      (teacher forcing); None for drafters that read no tokens.
    embed: token ids [...] -> [..., d_model], the base's token embedding
      at its decoder-input scale.
    feed: the training-time test: (index >= 1, state of head index + 1
      [..., d_model]) -> the embedding head index + 2 reads in place of
      next_tokens' (the token that state would have drafted); None:
      next_tokens throughout.
    block_lengths: [batch, n] for a one-pass block drafter: the block
      size each chosen position trains (`Drafter.training_lengths`);
      None: num_proposal_heads.
  """
  hidden: jax.Array
  features: jax.Array
  source: DraftSource | None
  next_tokens: jax.Array | None
  embed: Callable[[jax.Array], jax.Array]
  feed: Callable[[int, jax.Array], jax.Array] | None = None
  block_lengths: jax.Array | None = None

  def at_rows(self, rows: jax.Array) -> 'TrainingView':
    """The view at positions rows [batch, n] only (for drafters whose
    states at a position read nothing of the others')."""
    take = lambda x: None if x is None else jnp.take_along_axis(
        x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=1)
    return dataclasses.replace(self, hidden=take(self.hidden),
                               features=take(self.features),
                               next_tokens=take(self.next_tokens))


@dataclasses.dataclass(frozen=True)
class DecodeView:
  """What a drafter reads after a decoding call scored n positions.

  Attributes:
    cache: the drafter's own cache (`init_cache`; None if it keeps none).
    source: the drafter's view of the source, or None.
    hidden: [batch, n, d_model] the base's top outputs at the n positions
      the call scored, from absolute position `start`.
    features: [batch, n, F] its features there (`TrainingView.features`'
      layout).
    next_tokens: [batch, n] the token after each of those positions: the
      accepted tokens, then head 1's token after the last accepted one
      (what follows it is stale and unread).
    start: [batch] absolute position of features[:, 0].
    last: [batch] index of the last accepted position among the n: the
      draft follows head 1's token after it, next_tokens at `last`.
    weights: the drafter's decoding weights (`Drafter.weights`).
    embed: token ids [...] -> [..., d_model] (the base's embedding).
    project: states [..., d_model] -> the proposals' logits [..., vocab]
      (through the drafting vocabulary, if any).
  """
  cache: object
  source: DraftSource | None
  hidden: jax.Array
  features: jax.Array
  next_tokens: jax.Array
  start: jax.Array
  last: jax.Array
  weights: object
  embed: Callable[[jax.Array], jax.Array]
  project: Callable[[jax.Array], jax.Array]

  @property
  def last_hidden(self) -> jax.Array:
    """[batch, d_model] the base's top output at the last accepted
    position (what a one-position head reads)."""
    return ops.take_at(self.hidden, self.last)


class Drafter(nnx.Module):
  """One way of proposing heads 2..k: its parameters, training states,
  decoding weights, draft and partition rules (see the module docstring).

  Class attributes (what the config and the decoders check against):
    dependent: its heads read the tokens earlier heads chose, so a draft
      is made head after head (`draft_tokens`); False: all k - 1 states
      come from one pass (`proposal_states`), which trees, draft
      refinement and sampling read as independent per-position
      distributions.
    reads_tokens: it reads token embeddings (decoding weights then carry
      the embedding table).
    source_kinds: the DRAFT_SOURCES it can read an encoder-decoder's
      source through ('none' alone: it reads none).
    reads_features: it reads config.draft_feature_layers' outputs.
    samples_positions: its training may sample positions
      (train.head_position_fraction < 1).
    head1_through_layer: head 1 may go through its layer
      (config.head1_from_base=False).
    tensor_rules: (regex, spec) pairs, matched in full against the paths
      of its parameters below 'heads/' and of its decoding weights below
      'proposals/' or 'scoring/' (`drafters.tensor_rules` prefixes them),
      and its cache's below 'draft/' (`cache_rules`).
    cache_rules: (regex, spec) pairs for its cache's arrays.
  """
  dependent: ClassVar[bool] = False
  reads_tokens: ClassVar[bool] = False
  source_kinds: ClassVar[tuple[str, ...]] = ('none',)
  reads_features: ClassVar[bool] = False
  samples_positions: ClassVar[bool] = True
  head1_through_layer: ClassVar[bool] = False
  tensor_rules: ClassVar[tuple] = ()
  cache_rules: ClassVar[tuple] = ()
  # Where this instance reads the source (config.draft_source; a drafter
  # that reads one sets it).
  source_kind: str = 'none'

  @classmethod
  def problems(cls, config) -> list[str]:
    """What a TransformerConfig must not say for this drafter, beyond the
    class attributes' rules (one message each)."""
    del config
    return []

  def states(self, view: TrainingView, first: int, count: int,
             rows: jax.Array | None = None) -> jax.Array:
    """States of heads first+1 .. first+count (1-based) at every position,
    or at `rows` [batch, n] only: [batch, T or n, count, d_model]."""
    raise TypeError(f'{type(self).__name__} does not define the drafter '
                    f'protocol\'s states.')

  def auxiliary_loss(self, states: jax.Array, first: int,
                     hidden: jax.Array, target: jax.Array,
                     pad_id: int) -> jax.Array | float:
    """A loss of the drafter's own beside its heads' cross-entropy, from
    `states` of heads first+1 .. at every position (0.0: none)."""
    del states, first, hidden, target, pad_id
    return 0.0

  def training_lengths(self, key: jax.Array, shape: tuple[int, ...]
                       ) -> jax.Array | None:
    """[*shape] the block size each trained position learns
    (`TrainingView.block_lengths`), or None: every head at every position."""
    del key, shape
    return None

  def scoring_weights(self, dtype) -> HeadWeights | None:
    """Head 1 laid out for decoding; None: head 1 is the base's output."""
    del dtype
    return None

  def weights(self, k: int, dtype):
    """Heads 2..k laid out for decoding (None: the drafter is applied as
    a module and needs nothing laid out)."""
    del k, dtype
    return None

  def init_cache(self, batch: int, positions: int, dtype,
                 encoded: jax.Array | None = None):
    """An empty cache of its own for `positions` positions per example
    (None: it keeps none). `encoded`: an encoder-decoder's encoder output
    [batch, source_length, d_model]."""
    del batch, positions, dtype, encoded
    return None

  def source(self, memory, valid: jax.Array | None, encoded=None,
             cache=None) -> DraftSource | None:
    """Its view of the source: through the base's top decoder layer's
    projected memory (source 'base'); None where it reads none."""
    del encoded, cache
    if self.source_kind == 'none':
      return None
    return DraftSource(memory[-1], valid)

  def proposal_states(self, view: DecodeView, k: int):
    """One-pass drafters: ([batch, k - 1, d_model] heads 2..k's states
    after the last accepted position, the updated cache of its own)."""
    raise TypeError(f'{type(self).__name__} drafts head after head '
                    f'(dependent): call draft_tokens.')

  def draft_tokens(self, view: DecodeView, choose, k: int):
    """Dependent drafters: heads 2..k made head after head.

    Args:
      view: what the call scored.
      choose: (index, logits [batch, vocab]) -> [batch] the token of draft
        position `index` (0-based: head index + 2), argmax or a draw.
      k: the block size.

    Returns:
      (proposals [batch, k - 1], logits [batch, k - 1, vocab] each chosen
      from, the updated cache of its own).
    """
    raise TypeError(f'{type(self).__name__} drafts in one pass: call '
                    f'proposal_states.')

  def draft_tree(self, view: DecodeView, grow, depth: int):
    """Dependent drafters: a tree of drafts grown level by level, each
    node drafted once (`decoding/tree_growth.py`).

    Level 0 is the root (head 1's token after the last accepted
    position); at each level the drafter gives the logits of the children
    of every node the last `grow` returned (the root alone at level 0),
    as its chain draft would after that node's path.

    Args:
      view: what the call scored.
      grow: (level, logits [batch, W, vocab]) -> (tokens [batch, W'],
        parents [batch, W']): the next level's nodes to expand and their
        parents' places among the W.
      depth: levels (k - 1).

    Returns:
      The updated cache of its own.
    """
    raise TypeError(f'{type(self).__name__} drafts in one pass: its '
                    f'logits serve every node of a level.')
