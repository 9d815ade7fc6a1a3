"""One decoder to measure: greedy, blockwise (fixed k or 'auto'), refined.

The text and image reports, the bench and the drafts comparison all
describe what they decode with a `DecoderSpec`; `runner.run` decodes and
times them side by side.
"""

import dataclasses

from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.decoding import refine


@dataclasses.dataclass(frozen=True)
class DecoderSpec:
  """A decoder: greedy (k = 0), blockwise (k >= 1 or 'auto'), refined.

  Attributes:
    k: block size; 0 is greedy; 'auto' lets `tuning` choose per batch.
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
      sampling for k = 0, blockwise sampling otherwise.
    tree: '' (one draft a call), or the widths of a tree of the heads'
      candidates of depth k - 1 (`decoding.Tree.from_spec`, e.g. '2,2').
  """
  k: int | str = 0
  criterion: str = 'exact'
  min_block: int = 1
  refinement: refine.Refinement | None = None
  refinement_spec: str = ''
  name: str = ''
  sampler: str = ''
  tree: str = ''

  def __post_init__(self):
    if not self.name:
      object.__setattr__(self, 'name', self._default_name())

  def _default_name(self) -> str:
    sampled = f' {self.sampler}' if self.sampler else ''
    if not self.k:
      return f'ancestral{sampled}' if self.sampler else 'greedy'
    extra = '' if self.criterion == 'exact' else f' {self.criterion}'
    extra += f' l={self.min_block}' if self.min_block > 1 else ''
    extra += f' {self.refinement_spec}' if self.refinement_spec else ''
    extra += f' tree={self.tree}' if self.tree else ''
    return f'blockwise k={self.k}{extra}{sampled}'

  @property
  def kind(self) -> str:
    """'greedy', 'blockwise' or 'auto' (blockwise with k='auto')."""
    if not self.k:
      return 'greedy'
    return 'auto' if self.k == 'auto' else 'blockwise'

  def options(self, max_len: int) -> decoding.DecodeOptions:
    """The decode of a fixed k (greedy or blockwise; not 'auto')."""
    if self.k == 'auto':
      raise ValueError("k='auto' has no fixed options: its k is chosen per "
                       "batch shape.")
    return decoding.DecodeOptions(
        max_len=max_len, k=self.k,
        criterion=decoding.from_spec(self.criterion),
        min_block=self.min_block, refinement=self.refinement,
        sampler=(decoding.Sampler.from_spec(self.sampler) if self.sampler
                 else None),
        tree=decoding.Tree.from_spec(self.tree, self.k - 1) if self.tree
        else None)

  @property
  def sampling(self) -> bool:
    """Whether the decoder draws its tokens (temperature > 0)."""
    return bool(self.sampler) and not decoding.Sampler.from_spec(
        self.sampler).greedy

  def run(self, decoder: generate.Decoder, inputs, max_len: int,
          tuning=None, rescorers=None, key=0) -> decoding.DecodeResult:
    """Decodes `inputs` [batch, length].

    Args:
      decoder: the model's Decoder.
      inputs: [batch, length] token ids, right-padded.
      max_len: most tokens generated per example.
      tuning: `auto_k.tune_k`'s AutoK, for k='auto'.
      rescorers: {'ngram': ..., 'neural': ...}, as refinements need.
      key: a sampling decoder's seed or key (see `generate.Decoder.decode`).
    """
    if self.k == 'auto':
      return decoder.blockwise(
          inputs, k='auto', max_len=max_len,
          criterion=decoding.from_spec(self.criterion),
          min_block=self.min_block, tuning=tuning)
    rescorer = None
    if self.refinement is not None:
      rescorer = (rescorers or {}).get(self.refinement.rescorer)
    return decoder.decode(inputs, self.options(max_len), rescorer=rescorer,
                          key=key)

  def reference(self, specs: list['DecoderSpec']) -> 'DecoderSpec':
    """What this decoder's speedup is measured against: greedy decoding
    (the first of `specs`), or for a sampling decoder the ancestral
    sampling of the same sampler."""
    if not self.sampler:
      return specs[0]
    return next(s for s in specs if not s.k and s.sampler == self.sampler)


# The criteria a sampling decoder verifies with (decoding/sampling.py).
SAMPLING_CRITERIA = ('exact', 'typical')


def decoders_from_config(eval_config) -> list[DecoderSpec]:
  """The reports' decoders: greedy first (the reference), then blockwise
  for each k in eval.ks and each criterion in eval.criteria; then, for each
  sampler in eval.samplers, ancestral sampling (that sampler's reference)
  and blockwise sampling at each k with each criterion sampling takes
  ('exact': the rejection rule; 'typical:...')."""
  specs = [DecoderSpec()] + [
      DecoderSpec(k, criterion, eval_config.min_block)
      for k in eval_config.ks for criterion in eval_config.criteria]
  for sampler in eval_config.get('samplers', ()):
    specs.append(DecoderSpec(sampler=sampler))
    specs += [DecoderSpec(k, criterion, sampler=sampler)
              for k in eval_config.ks for criterion in eval_config.criteria
              if criterion.split(':')[0] in SAMPLING_CRITERIA]
  return specs
