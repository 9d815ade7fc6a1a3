"""Draft refinement (Kim et al. 2024): which drafts a blockwise call verifies.

Plain blockwise decoding proposes one draft, the argmax of each head. Here
the heads' top-t tokens at each position form a lattice (`lattice.py`), and
a rescorer picks the p drafts the next call verifies, merged on their
shared prefixes into one token tree (`tree.py`):

- 'none': the p best paths under the heads' own log probabilities;
- 'ngram': the p best paths under the heads' scores interpolated with an
  n-gram model over the preceding output (exact k-best Viterbi);
- 'neural': a beam of width p, left to right, under the heads' scores
  interpolated with a small autoregressive language model that reads a fixed
  window of the preceding output and the draft so far (p = 1: the paper's
  greedy local rescoring).

Refinement only changes what is proposed: verification, and so the output
under exact verification, is untouched. The first token of every draft is
the scoring model's own (always right); the lattice spans heads 2..k.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from bpd_jax.decoding import lattice
from bpd_jax.decoding import specs
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.infra import numeric

RESCORERS = ('none', 'ngram', 'neural')
# A spec's options: key -> (field, type).
_SPEC_KEYS = {'p': ('drafts', int), 't': ('top_t', int), 'w': ('weight', float),
              'n': ('nodes', int)}

# 'ngram': (context [..., c], word [...]) -> [...] log P(word | context).
# 'neural': tokens [batch, length] -> [batch, vocab] log P(next token).
Rescore = Callable[..., jax.Array]


@dataclasses.dataclass(frozen=True)
class Refinement:
  """Static refinement options (hashable: part of a compilation key).

  Attributes:
    drafts: p, drafts verified per example and call (1 <= p <= t^(k-1)).
    top_t: t, candidate tokens per head.
    rescorer: 'none', 'ngram' or 'neural'.
    weight: the rescorer's share of a draft's score, in [0, 1] (unused by
      'none').
    context: preceding output tokens the rescorer reads: n - 1 for an
      n-gram model, the window of the neural one.
    start_id: the token that stands before an output's first token (bos).
    nodes: p > 1 drafts are verified as one token tree (`tree.py`), merged
      on their shared prefixes: at most this many nodes (the best draft's
      whole chain, then the others' new nodes in order); 0: all of them,
      at most 1 + p (k - 1). Either way within the trees' budget,
      `tree.MAX_NODES`.
  """
  drafts: int = 1
  top_t: int = 1
  rescorer: str = 'none'
  weight: float = 0.5
  context: int = 0
  start_id: int = 2
  nodes: int = 0

  def __post_init__(self):
    if self.rescorer not in RESCORERS:
      raise ValueError(f'rescorer {self.rescorer!r} is not one of '
                       f'{RESCORERS}.')
    for name in ('drafts', 'top_t'):
      value = getattr(self, name)
      if not numeric.is_integer(value) or value < 1:
        raise ValueError(f'refinement {name}={value!r} must be an integer '
                         f'>= 1.')
    if not (numeric.is_finite(self.weight) and 0.0 <= self.weight <= 1.0):
      raise ValueError(f'refinement weight={self.weight!r} must be a number '
                       f'in [0, 1].')
    if not numeric.is_integer(self.nodes) or self.nodes < 0:
      raise ValueError(f'refinement nodes={self.nodes!r} must be an '
                       f'integer >= 0.')
    try:
      tree_lib.check_size(self.nodes)
    except ValueError as error:
      raise ValueError(f'refinement nodes={self.nodes}: {error}') from None
    if not numeric.is_integer(self.context) or self.context < 0:
      raise ValueError(f'refinement context={self.context!r} must be an '
                       f'integer >= 0.')
    if self.rescorer == 'neural' and self.context < 1:
      raise ValueError('neural rescoring needs a window of context >= 1 '
                       'tokens.')

  @classmethod
  def from_spec(cls, spec: str, window: int = 0) -> 'Refinement':
    """Options from 'RESCORER:p=P,t=T,w=W' (configs, flags).

    RESCORER is none, ngram or neural; p drafts verified per call, t tokens
    per head, w the rescorer's weight, n the nodes of their tree (defaults
    p=1, t=1, w=0.5, n=0: all), e.g. 'ngram:p=4,t=4,w=0.3' or
    'neural:t=4'. `window` is the neural
    rescorer's context; an n-gram model's comes with the model.
    """
    name, _, options = spec.partition(':')
    values = specs.fields(spec, options, _SPEC_KEYS, 'refinement')
    try:
      return cls(rescorer=name, context=window if name == 'neural' else 0,
                 **values)
    except ValueError as error:
      raise ValueError(f'refinement {spec!r}: {error}') from error

  def check(self, k: int, vocab_size: int):
    """Raises ValueError where these options cannot serve block size k."""
    if self.top_t > vocab_size:
      raise ValueError(f'top_t={self.top_t} exceeds the vocabulary size '
                       f'{vocab_size}.')
    paths = self.top_t ** (k - 1)
    if k > 1 and self.drafts > paths:
      raise ValueError(f'drafts={self.drafts} exceeds the {self.top_t}^'
                       f'{k - 1} = {paths} drafts of a top-{self.top_t} '
                       f'lattice at k={k}.')
    if k == 1 and self.drafts > 1:
      raise ValueError('k=1 has no proposals: drafts must be 1.')
    if self.nodes and not k <= self.nodes <= 1 + self.drafts * (k - 1):
      raise ValueError(f'nodes={self.nodes} must hold the best draft (k={k}) '
                       f'and at most all {self.drafts} drafts (1 + '
                       f'{self.drafts} x {k - 1}).')
    if self.drafts > 1:
      try:
        tree_lib.check_size(self.tree_size(k))
      except ValueError as error:
        raise ValueError(f'drafts={self.drafts} at k={k}: {error} Cap it '
                         f'with nodes (n) <= {tree_lib.MAX_NODES}.') from None

  def tree_size(self, k: int) -> int:
    """Nodes of the drafts' tree at block size k."""
    return self.nodes or 1 + self.drafts * (k - 1)

  @property
  def is_plain(self) -> bool:
    """Proposes exactly what plain blockwise decoding proposes."""
    return self.drafts == 1 and (self.top_t == 1 or self.rescorer == 'none')


def propose(refinement: Refinement, rescore: Rescore | None,
            token: jax.Array, proposal_logits: jax.Array,
            history: jax.Array) -> jax.Array:
  """The drafts of the next call.

  Args:
    refinement: the options.
    rescore: the rescorer's function (see `Rescore`), None for 'none'.
    token: [batch] the scoring model's next token (every draft's first).
    proposal_logits: [batch, k - 1, vocab] heads 2..k.
    history: [batch, refinement.context] the output's last tokens, oldest
      first, ending with `token` (start_id before the output's start).

  Returns:
    [batch, p, k] drafts, best first.
  """
  logits = proposal_logits.astype(jnp.float32)
  # The top t of the raw logits, normalised afterwards: fed a log_softmax,
  # XLA-CPU fused the vocabulary-wide normalisation into the lattice search
  # and recomputed it there, many times the cost.
  top, tokens = jax.lax.top_k(logits, refinement.top_t)
  head_scores = top - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  # Likewise the top-t selection: without the barrier it was recomputed
  # for each of the lattice's many readers.
  tokens, head_scores = jax.lax.optimization_barrier((tokens, head_scores))
  context = history
  p = refinement.drafts
  if refinement.rescorer == 'neural':
    drafts = _beam(tokens, head_scores, context, rescore, refinement.weight,
                   p)
  elif refinement.rescorer == 'ngram':
    drafts, _ = lattice.best_paths(tokens, head_scores, context, p, rescore,
                                   refinement.weight)
  else:
    drafts, _ = lattice.best_paths(tokens, head_scores, context[:, :0], p)
  first = jnp.broadcast_to(token[:, None, None], (token.shape[0], p, 1))
  return jnp.concatenate([first, drafts.astype(jnp.int32)], axis=2)


def _beam(tokens, head_scores, context, rescore, weight, width):
  """Left-to-right beam search over the lattice with a neural LM.

  Args:
    tokens, head_scores: [batch, m, t] the lattice.
    context: [batch, w] the preceding tokens the LM reads (its window).
    rescore: tokens [rows, length] -> [rows, vocab] next-token log probs.
    weight: the LM's share of the score.
    width: p, the beam (and the number of drafts).

  Returns:
    [batch, p, m] drafts, best first.
  """
  batch, m, t = tokens.shape
  beams = jnp.full((batch, width), -jnp.inf).at[:, 0].set(0.0)
  drafts = jnp.zeros((batch, width, 0), jnp.int32)
  window = context.shape[1]
  for j in range(m):
    # The LM reads the last `window` tokens: context, then the draft so far.
    sequence = jnp.concatenate(
        [jnp.broadcast_to(context[:, None], (batch, width, window)), drafts],
        axis=2)[:, :, -window:]
    lm = rescore(sequence.reshape(batch * width, window))
    lm = jnp.take_along_axis(
        lm.reshape(batch, width, -1), tokens[:, j][:, None, :], axis=2)
    step = (1.0 - weight) * head_scores[:, j][:, None, :] + weight * lm
    candidates = (beams[:, :, None] + step).reshape(batch, width * t)
    beams, pick = jax.lax.top_k(candidates, width)
    parent, choice = pick // t, pick % t
    drafts = jnp.concatenate([
        jnp.take_along_axis(drafts, parent[:, :, None], axis=1),
        jnp.take_along_axis(tokens[:, j], choice, axis=1)[:, :, None]],
                             axis=2)
  return drafts
