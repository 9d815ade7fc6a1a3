"""One decoder to measure: a name and its `decoding.DecodeOptions`
(`DecoderSpec`), or k='auto' (`AutoSpec`).

The text and image reports, the bench and the drafts comparison all
describe what they decode with these specs; `runner.run` decodes and times
them side by side. Both kinds answer the same questions: `name`, `kind`,
`max_len`, `decoded(batch_size, length)` (the options a batch shape was
decoded with), `run` and `reference`, and give a row its columns (`k`,
`criterion`, `min_block`, `sampler`).
"""

import dataclasses
import functools

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax import generate


@dataclasses.dataclass(frozen=True)
class DecoderSpec:
  """A decoder of fixed options: greedy (k = 1), blockwise, refined,
  sampled; a row's name and the one `decoding.DecodeOptions` it decodes
  with.

  Attributes:
    options: the decode (its max_len included).
    name: the row's label; by default 'greedy', 'blockwise k=4 top-k:2 l=2',
      'ancestral temperature=0.7', 'blockwise k=4 temperature=0.7',
      'blockwise k=4 tree=2,2' (widths), 'blockwise k=5 tree:32' (a Tree
      of 32 nodes) or 'blockwise k=8 lookup:heads=tree' (a drafter
      needing no training) (`default_name`; the bench and the drafts
      comparison give their own).
    refinement_spec: the refinement as written ('ngram:p=2,t=2'), for the
      default name.
  """
  options: decoding.DecodeOptions
  name: str = ''
  refinement_spec: str = ''

  def __post_init__(self):
    if not isinstance(self.options, decoding.DecodeOptions):
      raise ValueError(f'options={self.options!r} is not a '
                       f'decoding.DecodeOptions.')
    if not self.name:
      object.__setattr__(self, 'name', default_name(self.options,
                                                    self.refinement_spec))

  @classmethod
  def of(cls, max_len: int, k: int = 1, criterion: str = 'exact',
         min_block: int = 1, *, sampler: str = '',
         tree: str | decoding.Tree | decoding.DynamicTree = '',
         refinement_spec: str = '',
         window: int = 0, name: str = '',
         drafter: str = '') -> 'DecoderSpec':
    """The spec of options written as configs and flags write them
    (`DecodeOptions.from_specs`): criterion 'top-k:2', sampler
    'temperature=0.7', tree '2,2' (widths) or a `decoding.Tree` or
    `DynamicTree` (the candidates k='auto' was tuned with),
    refinement 'ngram:p=2,t=2' (with the neural rescorer's `window`),
    drafter 'lookup:heads=tree' (one that needs no training)."""
    given = (tree if isinstance(tree, (decoding.Tree, decoding.DynamicTree))
             else None)
    options = decoding.DecodeOptions.from_specs(
        max_len=max_len, k=k, criterion=criterion, min_block=min_block,
        refinement=refinement_spec, window=window, sampler=sampler,
        tree='' if given is not None else tree, drafter=drafter)
    if given is not None:
      options = dataclasses.replace(options, tree=given)
    if not name and tree and given is None:  # Named by its widths.
      name = default_name(options, refinement_spec, f'tree={tree}')
    return cls(options, name, refinement_spec)

  @property
  def max_len(self) -> int:
    return self.options.max_len

  @property
  def k(self) -> int:
    return self.options.k

  @property
  def criterion(self) -> str:
    """The criterion's spec ('exact', 'top-k:2', ...), a row's column."""
    return self.options.criterion.spec

  @property
  def min_block(self) -> int:
    return self.options.min_block

  @property
  def refinement(self) -> decoding.Refinement | None:
    return self.options.refinement

  @property
  def sampler(self) -> str:
    """The sampler's spec ('' without one), a row's column."""
    sampler = self.options.sampler
    return '' if sampler is None else sampler.spec

  @property
  def kind(self) -> str:
    """'greedy', 'ancestral' (k = 1 with a sampler) or 'blockwise'."""
    if self.k != 1:
      return 'blockwise'
    return 'ancestral' if self.sampling else 'greedy'

  @property
  def sampling(self) -> bool:
    """Whether the decoder draws its tokens (temperature > 0)."""
    return self.options.sampling

  def decoded(self, batch_size: int, length: int) -> decoding.DecodeOptions:
    """The options a batch of this shape was decoded with: `options`."""
    del batch_size, length
    return self.options

  def run(self, decoder: generate.Decoder, inputs, rescorers=None,
          key=0) -> decoding.DecodeResult:
    """Decodes `inputs` [batch, length].

    Args:
      decoder: the model's Decoder.
      inputs: [batch, length] token ids, right-padded.
      rescorers: {'ngram': ..., 'neural': ...}, as refinements need (the
        n-gram drafter reads the Decoder's own).
      key: a sampling decoder's seed or key (see `generate.Decoder.decode`).
    """
    rescorer = None
    if self.refinement is not None:
      rescorer = (rescorers or {}).get(self.refinement.rescorer)
    return decoder.decode(inputs, self.options, rescorer=rescorer, key=key)

  def reference(self, specs: list) -> 'DecoderSpec':
    """What this decoder's speedup is measured against: greedy decoding
    (the first of `specs`), or for a sampling decoder the ancestral
    sampling of the same sampler."""
    if not self.sampler:
      return specs[0]
    return next(s for s in specs
                if s.sampler == self.sampler and s.kind != 'blockwise')


@dataclasses.dataclass(frozen=True, eq=False)
class AutoSpec:
  """k='auto' (`auto_k.AutoDecoder`): per batch shape, the k or tree its tuning
  expects to be fastest. Compared by identity: the tuning is mutable (it
  keeps the step costs it measures).

  Attributes:
    tuning: `auto_k.tune_k`'s AutoK; its criterion is the decoder's.
    max_len: most tokens generated per example.
    name: the row's label.
  """
  tuning: auto_k.AutoK
  max_len: int
  name: str = 'auto'
  kind = 'auto'
  min_block = 1
  sampler = ''
  sampling = False

  @property
  def criterion(self) -> str:
    return self.tuning.criterion

  def decoded(self, batch_size: int, length: int) -> decoding.DecodeOptions:
    """The options `run` chose for a batch of this shape (a k, greedy
    decoding, or a tree)."""
    return auto_k.candidate_options(
        self.tuning.chosen((batch_size, length, self.max_len)),
        max_len=self.max_len,
        criterion=decoding.from_spec(self.tuning.criterion))

  def run(self, decoder: generate.Decoder, inputs, rescorers=None,
          key=0) -> decoding.DecodeResult:
    """Decodes `inputs` [batch, length] with `auto_k.AutoDecoder` (no
    rescorer, no key: argmax decoding without a refinement); a new batch
    shape is calibrated first."""
    del rescorers, key
    return auto_k.AutoDecoder(decoder, self.tuning).decode(
        inputs, max_len=self.max_len)

  def reference(self, specs: list) -> DecoderSpec:
    """Greedy decoding, the first of `specs`."""
    return specs[0]


def default_name(options: decoding.DecodeOptions, refinement_spec: str = '',
                 tree_name: str = '') -> str:
  """The reports' name of a decode (see `DecoderSpec.name`);
  `refinement_spec` the refinement as written, `tree_name` the tree's
  ('tree=2,2'; default: its spec, 'tree:7')."""
  sampler = '' if options.sampler is None else f' {options.sampler.spec}'
  if options.k == 1:
    return f'ancestral{sampler}' if sampler else 'greedy'
  criterion = options.criterion.spec
  extra = '' if criterion == 'exact' else f' {criterion}'
  extra += f' l={options.min_block}' if options.min_block > 1 else ''
  extra += f' {refinement_spec}' if refinement_spec else ''
  if options.tree is not None:
    extra += f' {tree_name or options.tree.spec}'
  if options.lookup is not None:
    extra += f' {options.lookup.spec}'
  return f'blockwise k={options.k}{extra}{sampler}'


# The criteria a sampling decoder verifies with (decoding/sampling.py).
SAMPLING_CRITERIA = ('exact', 'typical')


def decoders_from_config(eval_config) -> list[DecoderSpec]:
  """The reports' decoders: greedy first (the reference), then blockwise
  for each k in eval.ks and each criterion in eval.criteria; then, for each
  sampler in eval.samplers, ancestral sampling (that sampler's reference)
  and blockwise sampling at each k with each criterion sampling takes
  ('exact': the rejection rule; 'typical:...'). A k of 1 in eval.ks is
  the greedy (or ancestral) row already there. Each of eval.drafters
  (drafters that need no training) is a row at every k, exact; each of
  eval.trees a row at every k deeper than it, exact, and under each
  sampler too."""
  ks = [k for k in eval_config.ks if k > 1]
  spec = functools.partial(DecoderSpec.of, eval_config.max_len)
  specs = [spec()] + [spec(k, criterion, eval_config.min_block)
                      for k in ks for criterion in eval_config.criteria]
  specs += [spec(k, drafter=drafter) for drafter in eval_config.drafters
            for k in ks]
  trees = tuple(eval_config.get('trees', ()))
  specs += [spec(k, tree=tree) for tree in trees
            for k in tree_ks(tree, ks)]
  for sampler in eval_config.samplers:
    specs.append(spec(sampler=sampler))
    specs += [spec(k, criterion, sampler=sampler)
              for k in ks for criterion in eval_config.criteria
              if criterion.split(':')[0] in SAMPLING_CRITERIA]
    specs += [spec(k, sampler=sampler, tree=tree) for tree in trees
              for k in tree_ks(tree, ks)]
  return specs


def tree_ks(tree: str, ks) -> list[int]:
  """The ks a tree spec decodes at: those deep enough for it
  (`tree.shallowest`: a static tree's widths, padded with argmax nodes
  below them; a dynamic tree's levels drafting its N nodes). A bad spec
  is a ValueError naming it."""
  depth = decoding.tree.shallowest(tree)
  return [k for k in ks if k - 1 >= depth]
