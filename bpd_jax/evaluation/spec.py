"""One decoder to measure: greedy, blockwise, refined (`DecoderSpec`), or
k='auto' (`AutoSpec`).

The text and image reports, the bench and the drafts comparison all
describe what they decode with these specs; `runner.run` decodes and times
them side by side. Both kinds answer the same questions: `name`, `kind`,
`decoded(...)` (the options a batch shape was decoded with), `run` and
`reference`; a `DecoderSpec` has its `options(max_len)` (what
`generate.Decoder.decode` takes) for every shape.
"""

import dataclasses

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.decoding import refine


@dataclasses.dataclass(frozen=True)
class DecoderSpec:
  """A decoder of fixed options: greedy (k = 1), blockwise, refined,
  sampled.

  Attributes:
    k: block size; 1 is greedy decoding (ancestral sampling with a
      sampler), as in `decoding.DecodeOptions`.
    criterion: verification criterion spec ('exact', 'top-k:2',
      'distance:16', see `decoding.from_spec`).
    min_block: minimum block size l.
    refinement: draft refinement (Kim et al. 2024), None for plain drafts;
      its rescorer is looked up by name in the `rescorers` given to `run`.
    refinement_spec: the refinement as written ('ngram:p=2,t=2'), for rows.
    name: the row's label; by default 'greedy', 'blockwise k=4 top-k:2 l=2',
      'ancestral temperature=0.7', 'blockwise k=4 temperature=0.7' (the
      reports' names; the bench and the drafts comparison give their own).
    sampler: '' (argmax), or a `decoding.Sampler.from_spec` spec: ancestral
      sampling for k = 1, blockwise sampling otherwise.
    tree: '' (one draft a call), the widths of a tree of the heads'
      candidates of depth k - 1 (`decoding.Tree.from_spec`, e.g. '2,2'),
      or a `decoding.Tree` of depth k - 1 (e.g. `Tree.best`'s).
  """
  k: int = 1
  criterion: str = 'exact'
  min_block: int = 1
  refinement: refine.Refinement | None = None
  refinement_spec: str = ''
  name: str = ''
  sampler: str = ''
  tree: str | decoding.Tree = ''

  def __post_init__(self):
    if not self.name:
      object.__setattr__(self, 'name', self._default_name())

  def _default_name(self) -> str:
    sampled = f' {self.sampler}' if self.sampler else ''
    if self.k == 1:
      return f'ancestral{sampled}' if self.sampler else 'greedy'
    extra = '' if self.criterion == 'exact' else f' {self.criterion}'
    extra += f' l={self.min_block}' if self.min_block > 1 else ''
    extra += f' {self.refinement_spec}' if self.refinement_spec else ''
    extra += f' {self.tree_name}' if self.tree else ''
    return f'blockwise k={self.k}{extra}{sampled}'

  @property
  def tree_name(self) -> str:
    """'tree=2,2' (widths) or 'tree:N' (a Tree of N nodes); '' without."""
    if isinstance(self.tree, decoding.Tree):
      return self.tree.spec
    return f'tree={self.tree}' if self.tree else ''

  @property
  def kind(self) -> str:
    """'greedy', 'ancestral' (k = 1 with a sampler) or 'blockwise'."""
    if self.k != 1:
      return 'blockwise'
    return 'ancestral' if self.sampling else 'greedy'

  def options(self, max_len: int) -> decoding.DecodeOptions:
    """The decode this spec runs."""
    return decoding.DecodeOptions(
        max_len=max_len, k=self.k,
        criterion=decoding.from_spec(self.criterion),
        min_block=self.min_block, refinement=self.refinement,
        sampler=(decoding.Sampler.from_spec(self.sampler) if self.sampler
                 else None),
        tree=self._tree())

  def _tree(self) -> decoding.Tree | None:
    """The Tree to decode with (its depth is checked with the options)."""
    if isinstance(self.tree, decoding.Tree) or not self.tree:
      return self.tree or None
    return decoding.Tree.from_spec(self.tree, self.k - 1)

  def decoded(self, max_len: int, batch_size: int,
              length: int) -> decoding.DecodeOptions:
    """The options a batch of this shape was decoded with: `options`."""
    del batch_size, length
    return self.options(max_len)

  @property
  def sampling(self) -> bool:
    """Whether the decoder draws its tokens (temperature > 0)."""
    return bool(self.sampler) and not decoding.Sampler.from_spec(
        self.sampler).greedy

  def run(self, decoder: generate.Decoder, inputs, max_len: int,
          rescorers=None, key=0) -> decoding.DecodeResult:
    """Decodes `inputs` [batch, length].

    Args:
      decoder: the model's Decoder.
      inputs: [batch, length] token ids, right-padded.
      max_len: most tokens generated per example.
      rescorers: {'ngram': ..., 'neural': ...}, as refinements need.
      key: a sampling decoder's seed or key (see `generate.Decoder.decode`).
    """
    rescorer = None
    if self.refinement is not None:
      rescorer = (rescorers or {}).get(self.refinement.rescorer)
    return decoder.decode(inputs, self.options(max_len), rescorer=rescorer,
                          key=key)

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
    name: the row's label.
  """
  tuning: auto_k.AutoK
  name: str = 'auto'
  kind = 'auto'
  min_block = 1
  sampler = ''
  sampling = False

  @property
  def criterion(self) -> str:
    return self.tuning.criterion

  def decoded(self, max_len: int, batch_size: int,
              length: int) -> decoding.DecodeOptions:
    """The options `run` chose for a batch of this shape (a k, greedy
    decoding, or a tree)."""
    return auto_k.candidate_options(
        self.tuning.chosen((batch_size, length, max_len)), max_len=max_len,
        criterion=decoding.from_spec(self.tuning.criterion))

  def run(self, decoder: generate.Decoder, inputs, max_len: int,
          rescorers=None, key=0) -> decoding.DecodeResult:
    """Decodes `inputs` [batch, length] with `auto_k.AutoDecoder` (no
    rescorer, no key: argmax decoding without a refinement); a new batch
    shape is calibrated first."""
    del rescorers, key
    return auto_k.AutoDecoder(decoder, self.tuning).decode(inputs,
                                                           max_len=max_len)

  def reference(self, specs: list) -> DecoderSpec:
    """Greedy decoding, the first of `specs`."""
    return specs[0]


# The criteria a sampling decoder verifies with (decoding/sampling.py).
SAMPLING_CRITERIA = ('exact', 'typical')


def decoders_from_config(eval_config) -> list[DecoderSpec]:
  """The reports' decoders: greedy first (the reference), then blockwise
  for each k in eval.ks and each criterion in eval.criteria; then, for each
  sampler in eval.samplers, ancestral sampling (that sampler's reference)
  and blockwise sampling at each k with each criterion sampling takes
  ('exact': the rejection rule; 'typical:...'). A k of 1 in eval.ks is
  the greedy (or ancestral) row already there."""
  ks = [k for k in eval_config.ks if k > 1]
  specs = [DecoderSpec()] + [
      DecoderSpec(k, criterion, eval_config.min_block)
      for k in ks for criterion in eval_config.criteria]
  for sampler in eval_config.samplers:
    specs.append(DecoderSpec(sampler=sampler))
    specs += [DecoderSpec(k, criterion, sampler=sampler)
              for k in ks for criterion in eval_config.criteria
              if criterion.split(':')[0] in SAMPLING_CRITERIA]
  return specs
