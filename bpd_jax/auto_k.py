"""k='auto': the block size with the most expected tokens per second.

`AutoDecoder` decodes with it: `AutoDecoder(decoder, tuning).decode(inputs,
max_len=...)` decodes each batch shape with the `decoding.DecodeOptions` its
tuning chooses, timing the candidates' loops on this machine the first time
a shape is seen (`calibrate`: explicit, so that a plain `generate.Decoder`
never times anything).

Blockwise decoding pays only where the accepted blocks outgrow the extra cost
of a k-position call, and both sides move: T(k) depends on the machine and
the batch size (on a CPU it grows with k and with the batch, on an
accelerator at batch 1 it barely does), the accepted blocks on the heads and
the data. `AutoK` puts the two together:

- Acceptance statistics, from blockwise decodes of calibration inputs
  (`tune_k`): per example, how many tokens each call appended (j = 1..K),
  at the largest k and at each candidate k. A k that was not decoded is
  estimated from the largest k's calls, each run of right proposals cut
  at k: example i's mean block E_i[min(j, k)], its calls L_i / E_i[min(j,
  k)]. The estimate runs low, and lower for the slowest examples of a
  batch (a call that starts inside a long run of right proposals, as
  calls at a smaller k do, is not seen by the largest k's decode), enough
  to put greedy ahead where a small k ran faster, so `tune_k` decodes
  every candidate.
- Step costs T_B(k): the seconds of one iteration of the real decoding loop
  (model call, verification and bookkeeping) for every k at batch size B,
  measured on this machine the first time a batch shape is decoded
  (`timing.loop_iteration_seconds`), then kept.
- A batch runs until its slowest example ends, so k's expected time at
  batch B is E[max over B examples of calls_i(k)] x T_B(k), the expectation
  taken over random batches of the calibration examples. k = 1 is greedy
  decoding (L_i calls at T_B(1)), as everywhere (`decoding.options`).

The fastest k wins, but blockwise decoding must beat greedy's expected time
by `margin` to be chosen: where the predicted gain is within the model's
error, greedy decoding is the safe choice.

Trees (`decoding.Tree`) are candidates too when tuned with `tree_sizes`:
teacher-forced on the calibration outputs, how often each head's rank-r
token is the right one (`predictions.rank_probabilities`) gives the most
probable tree of each size (`Tree.best`) and what it expects to accept
beside the argmax chain of the same depth; an example's mean block with a
tree is its measured mean block at that depth times that ratio, and its
cost one iteration of the loop verifying it, measured as the k's are.

Dynamic trees (`decoding.DynamicTree`, made each call from the drafter's
confidence) are candidates when tuned with `dynamic_sizes`: no rank
statistics predict them, so the calibration inputs are decoded with each
(at the largest k) and its blocks measured, as the k's are.
"""

import dataclasses
import functools
import json
from typing import Callable

import numpy as np

from bpd_jax import decoding
from bpd_jax import predictions
from bpd_jax import timing
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.infra import atomic_files
from bpd_jax.infra import sharding

# Random batches the expected slowest example is averaged over.
_DRAWS = 512
# Candidates per head `tune_k`'s trees may take unless told (the bench
# checks its --tree_sizes against it).
TREE_TOP_T = 4


def candidate_name(candidate) -> str:
  """A candidate as saved and reported: '2' for k = 2 ('1': greedy
  decoding), a Tree's spec ('tree:N')."""
  if isinstance(candidate, (decoding.Tree, decoding.DynamicTree)):
    return candidate.spec
  return str(candidate)


def candidate_options(candidate, *, max_len: int,
                      criterion: decoding.Criterion
                      ) -> decoding.DecodeOptions:
  """The decode of a candidate: a k (1: greedy decoding), a Tree or a
  DynamicTree."""
  if isinstance(candidate, (decoding.Tree, decoding.DynamicTree)):
    return decoding.DecodeOptions(max_len=max_len, k=candidate.depth + 1,
                                  criterion=criterion, tree=candidate)
  return decoding.DecodeOptions(max_len=max_len, k=candidate,
                                criterion=criterion)


def _tokens(counts: np.ndarray) -> np.ndarray:
  """[examples] tokens of each example from its [examples, k + 1] counts
  of calls that appended j tokens."""
  return (counts * np.arange(counts.shape[1])).sum(axis=1)


@dataclasses.dataclass
class AutoK:
  """Acceptance statistics of a model's heads, and this machine's step costs.

  Attributes:
    appended: [examples, max_k + 1] int, appended[i, j]: calls of the
      calibration decode at max_k that appended j tokens to example i.
    criterion: the verification criterion the statistics hold for (its
      spec, e.g. 'exact').
    margin: the fraction of greedy's expected time blockwise decoding must
      save to be chosen.
    candidates: the block sizes to choose from (greedy decoding, k = 1,
      always is one); None: 1..max_k.
    step_costs: {(batch, source_len, max_len): {candidate: seconds of one
      loop iteration}}, measured; a candidate is a k or a Tree.
    rank_probabilities: [max_k - 1, t] how often head j + 2's rank-r token
      is the right one where the path above it can be (see the module
      docstring); None: no tree candidates.
    tree_sizes: nodes of the candidate trees (each the most probable tree
      of that size).
    appended_at: {k: [examples, k + 1]} the same counts of calibration
      decodes at smaller k's (those k's statistics are then measured, not
      estimated from `appended`).
    appended_dynamic: {spec: [examples, max_k + 1]} the same counts of
      calibration decodes with dynamic trees at max_k ('dynamic:N'
      specs): those trees are candidates too.
  """
  appended: np.ndarray
  criterion: str = 'exact'
  margin: float = 0.05
  candidates: tuple[int, ...] | None = None
  step_costs: dict = dataclasses.field(default_factory=dict)
  rank_probabilities: np.ndarray | None = None
  tree_sizes: tuple[int, ...] = ()
  appended_at: dict = dataclasses.field(default_factory=dict)
  appended_dynamic: dict = dataclasses.field(default_factory=dict)
  # {(batch, source_len, max_len): k or Tree}: a decode call looks it up.
  _choices: dict = dataclasses.field(default_factory=dict, repr=False)

  def __post_init__(self):
    self.appended = np.asarray(self.appended, np.int64)
    if (self.appended.ndim != 2 or self.appended.shape[1] < 2
        or not self.appended.sum(axis=1).all()):
      raise ValueError('appended must be [examples, max_k + 1] counts with '
                       f'at least one call an example; got shape '
                       f'{self.appended.shape}.')
    self.appended_at = {int(k): np.asarray(counts, np.int64)
                        for k, counts in self.appended_at.items()}
    for k, counts in self.appended_at.items():
      if not 1 < k < self.max_k or counts.shape != (len(self.appended),
                                                      k + 1):
        raise ValueError(f'appended_at[{k}] must be [{len(self.appended)}, '
                         f'{k + 1}] counts of a k in [2, {self.max_k - 1}]; '
                         f'got shape {counts.shape}.')
    self.appended_dynamic = {
        spec: np.asarray(counts, np.int64)
        for spec, counts in self.appended_dynamic.items()}
    for spec, counts in self.appended_dynamic.items():
      if counts.shape != self.appended.shape:
        raise ValueError(f'appended_dynamic[{spec!r}] must be '
                         f'{list(self.appended.shape)} counts; got shape '
                         f'{counts.shape}.')
    if not 0 <= self.margin < 1:
      raise ValueError(f'margin={self.margin} must be in [0, 1).')
    if self.candidates is not None:
      bad = [k for k in self.candidates if not 1 <= k <= self.max_k]
      if bad:
        raise ValueError(f'candidates {bad} are outside [1, {self.max_k}].')
      self.candidates = tuple(sorted({1, *self.candidates}))
    if self.tree_sizes and self.rank_probabilities is None:
      raise ValueError('tree candidates need rank_probabilities.')
    if self.rank_probabilities is not None:
      self.rank_probabilities = np.asarray(self.rank_probabilities,
                                           np.float64)

  @property
  def max_k(self) -> int:
    return self.appended.shape[1] - 1

  @property
  def trees(self) -> tuple[decoding.Tree, ...]:
    """The candidate trees, one of each size (`Tree.best`)."""
    return tuple(decoding.Tree.best(self.rank_probabilities, size)
                 for size in self.tree_sizes)

  @property
  def dynamic_trees(self) -> tuple[decoding.DynamicTree, ...]:
    """The candidate dynamic trees, at the largest k."""
    return tuple(decoding.DynamicTree.from_spec(spec, self.max_k - 1)
                 for spec in self.appended_dynamic)

  def _counts(self, candidate) -> np.ndarray | None:
    """The measured counts of a candidate, or None (estimated)."""
    if isinstance(candidate, decoding.DynamicTree):
      return self.appended_dynamic[candidate.spec]
    if isinstance(candidate, decoding.Tree):
      return None
    return self.appended_at.get(candidate)

  def mean_block(self, candidate) -> np.ndarray:
    """[examples] tokens per call of each example with a block size k
    (measured where `appended_at` has it), a Tree (estimated) or a
    DynamicTree (measured)."""
    if isinstance(candidate, decoding.Tree):
      chain = decoding.Tree.chain(candidate.depth)
      gain = (candidate.expected_block(self.rank_probabilities)
              / chain.expected_block(self.rank_probabilities))
      return self.mean_block(candidate.depth + 1) * gain
    counts = self._counts(candidate)
    if counts is not None:
      return _tokens(counts) / counts.sum(axis=1)
    j = np.arange(self.max_k + 1)
    return ((self.appended * np.minimum(j, candidate)).sum(axis=1)
            / self.appended.sum(axis=1))

  def calls(self, candidate) -> np.ndarray:
    """[examples] model calls of each example with a block size k (1:
    greedy decoding), a Tree or a DynamicTree."""
    counts = self._counts(candidate)
    if counts is not None:
      return counts.sum(axis=1).astype(np.float64)
    return _tokens(self.appended) / self.mean_block(candidate)

  def expected_calls(self, candidate, batch_size: int) -> float:
    """Expected calls of a batch: its slowest example's, with block size
    k or a Tree."""
    calls = self.calls(candidate)
    draws = np.random.default_rng(0).integers(
        0, len(calls), (_DRAWS, batch_size))
    return float(calls[draws].max(axis=1).mean())

  def expected_seconds(self, costs: dict, batch_size: int) -> dict:
    """{candidate: expected seconds of a batch's calls} from {candidate:
    seconds per call}; a candidate is a k or a Tree."""
    return {candidate: self.expected_calls(candidate, batch_size) * cost
            for candidate, cost in costs.items()}

  def choose_from(self, costs: dict, batch_size: int):
    """The k (1: greedy) or Tree to decode with, given {candidate:
    seconds per call}."""
    expected = self.expected_seconds(costs, batch_size)
    best = min(expected, key=expected.get)
    if best != 1 and expected[best] > (1 - self.margin) * expected[1]:
      return 1
    return best

  def choose(self, shape: tuple[int, int, int], measure: Callable):
    """The k (1: greedy decoding) or Tree to decode with.

    Args:
      shape: (batch_size, source_len, max_len) of the decode.
      measure: k or Tree -> seconds of one loop iteration at this shape;
        called for each candidate the first time a shape is seen.
    """
    if shape not in self._choices:
      if shape not in self.step_costs:
        ks = self.candidates or range(1, self.max_k + 1)
        self.step_costs[shape] = {candidate: measure(candidate)
                                  for candidate in (*ks, *self.trees,
                                                    *self.dynamic_trees)}
      self._choices[shape] = self.choose_from(self.step_costs[shape],
                                              shape[0])
    return self._choices[shape]

  def chosen(self, shape: tuple[int, int, int]):
    """What `choose` decided for this shape (k, 1 for greedy, or a Tree)."""
    if shape not in self._choices:
      raise ValueError(f'no choice made yet for the shape {shape}.')
    return self._choices[shape]

  def save(self, path: str) -> None:
    """Writes the statistics and the measured costs as JSON, atomically (a
    tree's cost under 'tree:N', N its nodes)."""
    costs = [dict(batch=b, source_len=s, max_len=m,
                  seconds={candidate_name(c): v for c, v in cost.items()})
             for (b, s, m), cost in self.step_costs.items()]
    probabilities = (None if self.rank_probabilities is None
                     else self.rank_probabilities.tolist())
    atomic_files.write_json(path, dict(
        appended=self.appended.tolist(),
        appended_at={str(k): counts.tolist()
                     for k, counts in self.appended_at.items()},
        criterion=self.criterion, margin=self.margin,
        candidates=self.candidates, step_costs=costs,
        rank_probabilities=probabilities, tree_sizes=self.tree_sizes,
        appended_dynamic={spec: counts.tolist() for spec, counts
                          in self.appended_dynamic.items()}),
        indent=1)

  @classmethod
  def load(cls, path: str) -> 'AutoK':
    """Reads what `save` wrote.

    The step costs in it hold for the machine that measured them.

    Raises:
      ValueError: naming `path`, where it cannot be read or is not such a
        file (not JSON, a field missing or out of its range).
    """
    try:
      return cls._from_file(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
      why = (f'{type(error).__name__}: {error}' if not isinstance(
          error, ValueError) else str(error)).split('\n')[0]
      raise ValueError(f"{path} is not a k='auto' tuning AutoK.save wrote: "
                       f'{why}') from None

  @classmethod
  def _from_file(cls, path: str) -> 'AutoK':
    with open(path) as f:
      data = json.load(f)
    candidates = data['candidates']
    tuning = cls(np.asarray(data['appended']), data['criterion'],
                 data['margin'], candidates and tuple(candidates),
                 rank_probabilities=data.get('rank_probabilities'),
                 tree_sizes=tuple(data.get('tree_sizes', ())),
                 appended_at={int(k): counts for k, counts
                              in data.get('appended_at', {}).items()},
                 appended_dynamic=data.get('appended_dynamic', {}))
    trees = {tree.spec: tree
             for tree in (*tuning.trees, *tuning.dynamic_trees)}
    tuning.step_costs = {
        (c['batch'], c['source_len'], c['max_len']):
        {trees[name] if name in trees else int(name): seconds
         for name, seconds in c['seconds'].items()}
        for c in data['step_costs']}
    return tuning


class AutoDecoder:
  """k='auto': decodes each batch shape with the k (1: greedy decoding) or
  Tree its tuning expects to be fastest on this machine.

  The choice needs this machine's step costs at the shape: `calibrate`
  times one loop iteration of each candidate on the decoder
  (`timing.loop_iteration_seconds`, seconds per shape) the first time a
  shape is seen and keeps them in the tuning (`AutoK.step_costs`, saved
  with it); `decode` calibrates a shape it has not seen.

      tuning = auto_k.tune_k(decoder, calibration_inputs, max_len=64)
      auto = auto_k.AutoDecoder(decoder, tuning)
      result = auto.decode(inputs, max_len=64)
      auto.options(*inputs.shape, max_len=64)  # What it decoded with.
  """

  def __init__(self, decoder, tuning: AutoK,
               criterion: decoding.Criterion | None = None):
    """Checks that the tuning holds for this decode.

    Args:
      decoder: the model's `generate.Decoder`.
      tuning: the acceptance statistics and step costs (`tune_k`).
      criterion: the verification criterion; None: the tuning's own (a
        different one is refused: tune with the criterion you decode with).
    """
    if not isinstance(tuning, AutoK):
      raise ValueError("k='auto' needs tuning=auto_k.tune_k(decoder, "
                       "calibration_inputs, max_len=...).")
    if criterion is None:
      criterion = decoding.from_spec(tuning.criterion)
    if not isinstance(criterion, decoding.Criterion):
      raise ValueError(f'criterion={criterion!r} is not a '
                       f'decoding.Criterion.')
    if criterion.spec != tuning.criterion:
      raise ValueError(f'the tuning holds for criterion '
                       f'{tuning.criterion!r}, not {criterion.spec!r}: '
                       f'tune with the criterion you decode with.')
    self.decoder, self.tuning, self.criterion = decoder, tuning, criterion

  def calibrate(self, batch_size: int, length: int, *,
                max_len: int) -> decoding.DecodeOptions:
    """The options to decode inputs [batch_size, length] with; the first
    time a shape is seen, each candidate's loop is timed on the decoder."""
    options = functools.partial(candidate_options, max_len=max_len,
                                criterion=self.criterion)
    return options(self.tuning.choose(
        (batch_size, length, max_len),
        lambda candidate: timing.loop_iteration_seconds(
            self.decoder, options(candidate), batch_size, length)))

  def options(self, batch_size: int, length: int, *,
              max_len: int) -> decoding.DecodeOptions:
    """What `calibrate` chose for inputs of this shape (ValueError for a
    shape it has not seen)."""
    return candidate_options(
        self.tuning.chosen((batch_size, length, max_len)), max_len=max_len,
        criterion=self.criterion)

  def decode(self, inputs, *, max_len: int) -> decoding.DecodeResult:
    """Decodes `inputs` [batch, length] with the options `calibrate`
    chooses for their shape (calibrating a new shape first)."""
    batch_size, length = _shape(inputs)
    return self.decoder.decode(
        inputs, self.calibrate(batch_size, length, max_len=max_len))


def _shape(inputs) -> tuple[int, int]:
  shape = np.shape(inputs)
  if len(shape) != 2:
    raise ValueError(f'inputs must be [batch, length]; got shape {shape}.')
  return shape


def tune_k(decoder, inputs, *, max_len: int,
           criterion: decoding.Criterion = decoding.Exact(),
           batch_size: int = 8, margin: float = 0.05,
           candidates=None, tree_sizes=(), top_t: int = TREE_TOP_T,
           every_k: bool = True, dynamic_sizes=()) -> AutoK:
  """Acceptance statistics for k='auto', from decodes at the candidate k's.

  Args:
    decoder: a `generate.Decoder` of the model (its compiled programs are
      reused).
    inputs: [examples, length] calibration inputs, like the ones to decode
      (e.g. training sources: not the data the decodes are judged on).
    max_len: most tokens to generate per example.
    criterion: the verification criterion the decodes will use.
    batch_size: examples decoded together here (no effect on the
      statistics; on a Decoder's mesh, each batch's rows are repeated up
      to a multiple of its data axis's devices).
    margin: the fraction of greedy's expected time blockwise decoding must
      save to be chosen.
    candidates: the block sizes to choose from (greedy always is one);
      None: every k up to the model's heads.
    tree_sizes: nodes of the trees to choose from too (e.g. (16, 32)),
      each the most probable tree of that size over the heads' top_t;
      exact verification of an encoder-decoder model only.
    top_t: candidates per head the trees may take.
    every_k: decode the inputs at each candidate k below the largest too,
      so that their statistics are measured rather than estimated (see
      the module docstring); one more compiled decode each.
    dynamic_sizes: nodes of dynamic trees (`decoding.DynamicTree`, default
      top and frontier, at the largest k) to choose from too, each decoded
      on the inputs here.

  Returns:
    AutoK; it measures this machine's step costs for each new batch shape
    it is asked about, and can be saved with `save`.
  """
  inputs = np.asarray(inputs)
  heads = decoder.config.num_proposal_heads
  if tree_sizes and not isinstance(criterion, decoding.Exact):
    raise ValueError(f'tree tuning measures exact acceptance, not '
                     f'{criterion.spec!r}.')
  tree_lib.check_sizes(tree_sizes, top_t, heads - 1)
  dynamic = [decoding.DynamicTree(size, heads - 1) for size in dynamic_sizes]

  # A Decoder on a mesh splits each batch over its data axis: a batch's
  # rows are repeated up to a multiple of its devices, and the repeats
  # left out of the statistics.
  rows = 1 if decoder.mesh is None else decoder.mesh.shape[
      decoder.batch_axis]

  def decode(k, tree=None):
    options = decoding.DecodeOptions(max_len=max_len, k=k,
                                     criterion=criterion, tree=tree)
    results = []
    for start in range(0, len(inputs), batch_size):
      batch = inputs[start:start + batch_size]
      results.append((decoder.decode(sharding.repeat_rows(batch, rows),
                                     options), len(batch)))
    return results

  def histogram(results):
    return np.concatenate([np.asarray(r.block_sizes)[:real]
                           for r, real in results])

  results = decode(heads)
  appended = histogram(results)
  smaller = sorted({k for k in (candidates or range(2, heads))
                    if 1 < k < heads}) if every_k else []
  appended_at = {k: histogram(decode(k)) for k in smaller}
  appended_dynamic = {tree.spec: histogram(decode(heads, tree))
                      for tree in dynamic}
  probabilities = None
  if tree_sizes:
    # Exact decoding's outputs are greedy's: the heads' ranks of the right
    # tokens, teacher-forced on them.
    outputs = np.concatenate([np.asarray(r.tokens)[:real]
                              for r, real in results])
    lengths = np.concatenate([np.asarray(r.lengths)[:real]
                              for r, real in results])
    top = predictions.head_predictions(
        decoder.model, np.asarray(inputs), outputs, heads=heads, top_t=top_t,
        batch_size=batch_size)[0]
    probabilities = predictions.rank_probabilities(top, outputs, lengths)
  return AutoK(appended, criterion.spec, margin, candidates,
               rank_probabilities=probabilities,
               tree_sizes=tuple(tree_sizes), appended_at=appended_at,
               appended_dynamic=appended_dynamic)
