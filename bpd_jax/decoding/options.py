"""What one decode does: the decoder, its block size and verification rules.

`DecodeOptions` is the one description of a decode that every layer passes
around: the decoding loops take it (`blockwise.blockwise_decode`,
`sampling.blockwise_sample_decode`), `generate.Decoder` compiles one
program per distinct options object (it is hashable and static), the
config checks and the bench and draft jobs validate their settings by
building one. Its checks are the only place that knows the limits of k,
min_block, the criterion and the refinement, and `proposer` the only
place that says how a call's drafts are made. It sits on decoding/'s
ground floor with the value types it is made of (criteria, `Tree`,
`Refinement`, `Sampler`); the loops sit above it:

    options = DecodeOptions(max_len=64, k=4, criterion=TopK(2))
    options.check(num_heads=8, vocab_size=32000)   # ValueError naming a value

k is the block size: the most tokens a call appends, k - 1 of them the
proposal heads'. Greedy decoding is k = 1 (ancestral sampling with a
sampler), and nothing else is: as in Stern et al., where greedy decoding is
blockwise decoding with no proposals, so that k is the same number in the
options, in a result's block_sizes (k + 1 columns), in k='auto''s
candidates and in every report's k column, with no exception for greedy.
"""

import dataclasses

from bpd_jax.decoding import criteria as criteria_lib
from bpd_jax.decoding import lookup as lookup_lib
from bpd_jax.decoding import refine as refine_lib
from bpd_jax.decoding import sampler as sampler_lib
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.infra import numeric

# How a call's drafts are made (`DecodeOptions.proposer`).
PROPOSERS = ('heads', 'tree', 'refined', 'lookup', 'lookup_tree')


def required_positions(prompt_length: int, max_len: int, k: int = 1) -> int:
  """Decoder positions a cache must hold.

  The prompt, max_len generated tokens, and the k - 1 positions a proposal
  block reaches past the last token (an example that has finished still
  takes part in the batch's calls, at its final offset).
  """
  return prompt_length + max_len + k - 1


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
  """Static decoding options (hashable: part of the compilation key).

  Attributes:
    max_len: most tokens generated per example, >= 1.
    k: the block size, 1 <= k <= the model's proposal heads; 1 is greedy
      decoding (see the module docstring).
    criterion: how proposals are verified; Exact() keeps greedy's output.
    min_block: l, the fewest tokens a call appends (1 <= l <= k).
    refinement: several drafts per call from the heads' top-t lattice (Kim
      et al. 2024); None: the heads' argmax, one draft.
    sampler: sample instead of taking the argmax (`sampler.Sampler`):
      ancestral sampling for k = 1, blockwise sampling with the rejection
      rule (criterion Exact: the base model's distribution) or typical
      acceptance (Typical) otherwise; None, or temperature 0: greedy.
      Its numbers are traced, not part of the compilation key.
    tree: a tree of the heads' candidates of depth k - 1, every node
      verified in one call: static (`tree.Tree`) or made each call from
      the drafter's confidence (`tree.DynamicTree`); None: the heads'
      argmax, one draft.
    lookup: drafts that need no training (`lookup.Lookup`: prompt lookup
      or an n-gram model), alone or beside the heads; None: the model's
      drafter alone.
  """
  max_len: int
  k: int = 1
  criterion: criteria_lib.Criterion = criteria_lib.Exact()
  min_block: int = 1
  refinement: refine_lib.Refinement | None = None
  sampler: sampler_lib.Sampler | None = None
  tree: tree_lib.Tree | tree_lib.DynamicTree | None = None
  lookup: lookup_lib.Lookup | None = None

  def __post_init__(self):
    # numpy integers are integers (`numeric`); held as Python ints, options
    # that differ only in that type print alike and are one compilation key.
    for name in ('max_len', 'k', 'min_block'):
      value = getattr(self, name)
      if numeric.is_integer(value):
        object.__setattr__(self, name, int(value))

  @classmethod
  def from_specs(cls, *, max_len: int, k: int = 1, criterion: str = 'exact',
                 min_block: int = 1, refinement: str = '',
                 window: int = 0, sampler: str = '',
                 tree: str = '', drafter: str = '') -> 'DecodeOptions':
    """Options from the strings of configs and flags.

    Args:
      max_len, k, min_block: as the attributes.
      criterion: 'exact', 'top-k:T' or 'distance:EPS'.
      refinement: '' (plain drafts) or a `refine.Refinement.from_spec` spec,
        e.g. 'ngram:p=4,t=4,w=0.3'.
      window: the neural rescorer's window, for a 'neural' refinement.
      sampler: '' (argmax) or a `sampler.Sampler.from_spec` spec, e.g.
        'temperature=0.7,top_p=0.9'.
      tree: '' (one draft), the widths of a tree of depth k - 1
        (`tree.Tree.from_spec`), e.g. '2,2', or a dynamic tree of N nodes,
        'dynamic:64'.
      drafter: '' or 'heads' (the model's drafter), or a drafter that
        needs no training (`lookup.Lookup.from_spec`), e.g. 'lookup',
        'lookup:min=3,heads=tree', 'ngram'.
    """
    return cls(max_len=max_len, k=k,
               criterion=criteria_lib.from_spec(criterion),
               min_block=min_block,
               refinement=(refine_lib.Refinement.from_spec(refinement, window)
                           if refinement else None),
               sampler=(sampler_lib.Sampler.from_spec(sampler)
                        if sampler else None),
               tree=tree_lib.Tree.from_spec(tree, k - 1) if tree else None,
               lookup=lookup_lib.parse(drafter))

  @property
  def sampling(self) -> bool:
    """Whether the decode draws tokens (a sampler with temperature > 0)."""
    return self.sampler is not None and not self.sampler.greedy

  def static(self) -> 'DecodeOptions':
    """The compilation key: the sampler's numbers are traced arguments, so
    only whether the decode samples is static; at k = 1 there is no
    proposal to verify, so every criterion decodes as Exact (greedy
    decoding is one program whatever criterion it was given)."""
    sampler = None
    if self.sampler is not None and self.sampling:
      sampler = dataclasses.replace(_SAMPLING,
                                    proposals=self.sampler.proposals)
    criterion = criteria_lib.Exact() if self.k == 1 else self.criterion
    return dataclasses.replace(self, sampler=sampler, criterion=criterion)

  @property
  def proposer(self) -> str:
    """How a call's drafts are made, one of PROPOSERS: 'heads' (the
    drafter's argmax, or a sampler's proposals: one draft), 'tree' (the
    static tree's nodes), 'refined' (the refinement's drafts: one, or
    several verified as a tree), 'lookup' (a drafter needing no
    training: its draft, or the heads' where it has none if they take
    part), 'lookup_tree' (its draft and the heads', one tree). Options
    that propose what the drafter's argmax proposes (k = 1, a chain, a
    plain refinement) are 'heads'."""
    if self.k > 1 and self.lookup is not None:
      return 'lookup_tree' if self.lookup.heads == 'tree' else 'lookup'
    if self.k > 1 and self.refinement is not None and (
        not self.refinement.is_plain):
      return 'refined'
    if self.k > 1 and self.tree is not None and not self.tree.is_chain:
      return 'tree'
    return 'heads'

  @property
  def scored(self) -> int:
    """Positions a call scores per example: the block, or the nodes of
    the tree its drafts make."""
    if self.proposer == 'tree':
      return self.tree.size
    if self.proposer == 'refined' and self.refinement.drafts > 1:
      return self.refinement.tree_size(self.k)
    if self.proposer == 'lookup_tree':
      return 1 + 2 * (self.k - 1)
    return self.k

  @property
  def uses_heads(self) -> bool:
    """Whether the model's proposal heads draft (k > 1, and no drafter
    needing no training drafts alone): what bounds k by their number."""
    return self.k > 1 and (self.lookup is None
                           or self.lookup.heads != 'none')

  def required_positions(self, prompt_length: int) -> int:
    """Decoder positions a decode after a prompt of this length reaches
    (what the model's positions must cover)."""
    return required_positions(prompt_length, self.max_len,
                                         self.k)

  def cache_positions(self, prompt_length: int) -> int:
    """Entries the cache holds per example: the positions, and a tree's
    nodes beyond its depth (node i of a call is written at the root's
    position + i)."""
    return required_positions(prompt_length, self.max_len,
                                         self.scored)

  def check(self, num_heads: int, vocab_size: int,
            dependent_heads: str = '') -> None:
    """Raises ValueError naming the value that a model of `num_heads`
    proposal heads and this vocabulary cannot decode with.

    `dependent_heads`: the name of the model's head layer where its heads
    read each other's proposals ('' otherwise): no lattice refinement.
    """
    if not numeric.is_integer(self.max_len) or self.max_len < 1:
      raise ValueError(f'max_len={self.max_len!r} must be an integer >= 1.')
    if self.lookup is not None:
      self._check_lookup()
    elif not (numeric.is_integer(self.k) and 1 <= self.k <= num_heads):
      raise ValueError(f'k={self.k!r} must be an integer in [1, '
                       f"{num_heads}], the model's number of proposal "
                       f'heads (1: greedy decoding).')
    if self.uses_heads and self.k > num_heads:
      raise ValueError(f'k={self.k} with the heads drafting '
                       f'(drafter {self.lookup.spec!r}) must be at most '
                       f"{num_heads}, the model's number of proposal "
                       f"heads; heads='none' drafts without them.")
    if not isinstance(self.criterion, criteria_lib.Criterion):
      raise ValueError(f'criterion={self.criterion!r} is not a '
                       f'decoding.Criterion.')
    if self.sampler is not None:
      self._check_sampler(vocab_size)
    if (isinstance(self.criterion, criteria_lib.TopK)
        and self.criterion.t > vocab_size):
      raise ValueError(f'top-k verification t={self.criterion.t} exceeds '
                       f'the vocabulary size {vocab_size}.')
    if self.tree is not None:
      self._check_tree(vocab_size)
    if self.refinement is not None:
      self._check_refinement(vocab_size, dependent_heads)
    self._check_min_block()

  def _check_min_block(self) -> None:
    """l in [1, k]; l > 1 accepts the first l - 1 proposals of the one
    argmax draft unverified, so it needs that draft."""
    if not (numeric.is_integer(self.min_block)
            and 1 <= self.min_block <= self.k):
      raise ValueError(f'min_block={self.min_block!r} must be an integer in '
                       f'[1, k={self.k}].')
    if self.min_block == 1:
      return
    several = self.refinement is not None and self.refinement.drafts > 1
    if self.tree is not None or several:
      raise ValueError(f'min_block={self.min_block}: a tree has no one '
                       f'draft to accept unverified (nor has a refinement '
                       f'of several drafts); use min_block=1.')
    if self.sampling:
      raise ValueError(f'sampling takes min_block=1, not {self.min_block}: '
                       f'unverified proposals would change the '
                       f'distribution.')

  def _check_lookup(self) -> None:
    if not isinstance(self.lookup, lookup_lib.Lookup):
      raise ValueError(f'lookup={self.lookup!r} is not a decoding.Lookup.')
    self.lookup.check()
    if not (numeric.is_integer(self.k) and self.k >= 2):
      raise ValueError(f'k={self.k!r}: drafter {self.lookup.spec!r} '
                       f'proposes k - 1 tokens a call; k must be an '
                       f'integer >= 2 (1: greedy decoding, with no '
                       f'drafter).')
    if self.tree is not None or self.refinement is not None:
      raise ValueError(f'drafter {self.lookup.spec!r} takes no tree and no '
                       f"refinement (heads=tree verifies its draft and the "
                       f"heads' as one tree).")
    if self.min_block != 1:
      raise ValueError(f'min_block={self.min_block}: drafter '
                       f'{self.lookup.spec!r} may propose nothing, so it '
                       f'has no draft to accept unverified; use '
                       f'min_block=1.')

  def _check_refinement(self, vocab_size: int, dependent_heads: str) -> None:
    if self.sampling:
      raise ValueError('sampling takes no refinement: its drafts are not '
                       'drawn from distributions the rejection rule '
                       'knows.')
    if not isinstance(self.refinement, refine_lib.Refinement):
      raise ValueError(f'refinement={self.refinement!r} is not a '
                       f'decoding.Refinement.')
    self.refinement.check(self.k, vocab_size)
    if dependent_heads and not self.refinement.is_plain:
      raise ValueError(
          f'draft refinement picks drafts from a lattice of independent '
          f"heads' top-t; {dependent_heads!r} heads read each other's "
          f'proposals, so their drafts are made one head after another: '
          f'decode them without a refinement.')

  def _check_tree(self, vocab_size: int) -> None:
    if not isinstance(self.tree, (tree_lib.Tree, tree_lib.DynamicTree)):
      raise ValueError(f'tree={self.tree!r} is not a decoding.Tree or '
                       f'DynamicTree.')
    if self.tree.depth != self.k - 1:
      raise ValueError(f'a tree of depth {self.tree.depth} verifies '
                       f'{self.tree.depth + 1} tokens a call: k must be '
                       f'{self.tree.depth + 1}, not {self.k}.')
    if self.tree.top_t > vocab_size:
      raise ValueError(f'the tree reads the top {self.tree.top_t} tokens '
                       f'of a vocabulary of {vocab_size}.')
    if self.refinement is not None:
      raise ValueError('a tree takes no refinement: a refinement makes its '
                       'own tree of its drafts.')

  def _check_sampler(self, vocab_size: int) -> None:
    if not isinstance(self.sampler, sampler_lib.Sampler):
      raise ValueError(f'sampler={self.sampler!r} is not a '
                       f'decoding.Sampler.')
    self.sampler.check(vocab_size)
    if not self.sampling:
      return
    if not isinstance(self.criterion, (criteria_lib.Exact,
                                       criteria_lib.Typical)):
      raise ValueError(f'sampling verifies with the rejection rule '
                       f"(criterion 'exact') or typical acceptance, not "
                       f'{self.criterion.spec!r}.')
    if self.k == 1 and not isinstance(self.criterion, criteria_lib.Exact):
      raise ValueError('ancestral sampling (k=1) takes no criterion.')
    if (self.proposer in ('tree', 'lookup_tree')
        and not isinstance(self.criterion, criteria_lib.Exact)):
      raise ValueError('a tree under sampling is verified by the rejection '
                       "rule (criterion 'exact'), not typical acceptance.")


# The static stand-in of any sampler with temperature > 0.
_SAMPLING = sampler_lib.Sampler(temperature=1.0)
