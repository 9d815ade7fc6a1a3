"""k='auto': the block size with the most expected tokens per second.

Blockwise decoding pays only where the accepted blocks outgrow the extra cost
of a k-position call, and both sides move: T(k) depends on the machine and
the batch size (on a CPU it grows with k and with the batch, on an
accelerator at batch 1 it barely does), the accepted blocks on the heads and
the data. `AutoK` puts the two together:

- Acceptance statistics, from one exact blockwise decode of calibration
  inputs at the largest k (`tune_k`): per example, how many tokens
  each call appended (j = 1..K). With a smaller k the same run of right
  proposals is cut at k, so example i's mean block at k is estimated as
  E_i[min(j, k)], and its calls as L_i / E_i[min(j, k)].
- Step costs T_B(k): the seconds of one iteration of the real decoding loop
  (model call, verification and bookkeeping) for every k at batch size B,
  measured on this machine the first time a batch shape is decoded
  (`timing.loop_iteration_seconds`), then kept.
- A batch runs until its slowest example ends, so k's expected time at
  batch B is E[max over B examples of calls_i(k)] x T_B(k), the expectation
  taken over random batches of the calibration examples. k = 1 stands for
  greedy decoding (L_i calls at greedy's T_B(1)).

The fastest k wins, but blockwise decoding must beat greedy's expected time
by `margin` to be chosen: where the predicted gain is within the model's
error, greedy decoding is the safe choice.
"""

import dataclasses
import json
from typing import Callable

import numpy as np

from bpd_jax import decoding

# Random batches the expected slowest example is averaged over.
_DRAWS = 512


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
    step_costs: {(batch, source_len, max_len): {k: seconds of one loop
      iteration}}, measured.
  """
  appended: np.ndarray
  criterion: str = 'exact'
  margin: float = 0.05
  candidates: tuple[int, ...] | None = None
  step_costs: dict = dataclasses.field(default_factory=dict)
  # {(batch, source_len, max_len): k}: a decode call looks its choice up.
  _choices: dict = dataclasses.field(default_factory=dict, repr=False)

  def __post_init__(self):
    self.appended = np.asarray(self.appended, np.int64)
    if (self.appended.ndim != 2 or self.appended.shape[1] < 2
        or not self.appended.sum(axis=1).all()):
      raise ValueError('appended must be [examples, max_k + 1] counts with '
                       f'at least one call an example; got shape '
                       f'{self.appended.shape}.')
    if not 0 <= self.margin < 1:
      raise ValueError(f'margin={self.margin} must be in [0, 1).')
    if self.candidates is not None:
      bad = [k for k in self.candidates if not 1 <= k <= self.max_k]
      if bad:
        raise ValueError(f'candidates {bad} are outside [1, {self.max_k}].')
      self.candidates = tuple(sorted({1, *self.candidates}))

  @property
  def max_k(self) -> int:
    return self.appended.shape[1] - 1

  def mean_block(self, k: int) -> np.ndarray:
    """[examples] estimated tokens per call of each example at block size k."""
    j = np.arange(self.max_k + 1)
    return ((self.appended * np.minimum(j, k)).sum(axis=1)
            / self.appended.sum(axis=1))

  def expected_calls(self, k: int, batch_size: int) -> float:
    """Expected calls of a batch: its slowest example's, at block size k."""
    lengths = (self.appended * np.arange(self.max_k + 1)).sum(axis=1)
    calls = lengths / self.mean_block(k)
    draws = np.random.default_rng(0).integers(
        0, len(calls), (_DRAWS, batch_size))
    return float(calls[draws].max(axis=1).mean())

  def expected_seconds(self, costs: dict[int, float],
                       batch_size: int) -> dict[int, float]:
    """{k: expected seconds of a batch's calls} from {k: seconds per call}."""
    return {k: self.expected_calls(k, batch_size) * cost
            for k, cost in costs.items()}

  def choose_from(self, costs: dict[int, float], batch_size: int) -> int:
    """The k to decode with (1: greedy) given {k: seconds per call}."""
    expected = self.expected_seconds(costs, batch_size)
    best = min(expected, key=expected.get)
    if best != 1 and expected[best] > (1 - self.margin) * expected[1]:
      return 1
    return best

  def choose(self, shape: tuple[int, int, int],
             measure: Callable[[int], float]) -> int:
    """The k to decode with (1: greedy decoding).

    Args:
      shape: (batch_size, source_len, max_len) of the decode.
      measure: k -> seconds of one loop iteration at this shape; called
        for each candidate k the first time a shape is seen.
    """
    if shape not in self._choices:
      if shape not in self.step_costs:
        ks = self.candidates or range(1, self.max_k + 1)
        self.step_costs[shape] = {k: measure(k) for k in ks}
      self._choices[shape] = self.choose_from(self.step_costs[shape],
                                              shape[0])
    return self._choices[shape]

  def save(self, path: str) -> None:
    """Writes the statistics and the measured costs as JSON."""
    costs = [dict(batch=b, source_len=s, max_len=m,
                  seconds={str(k): v for k, v in c.items()})
             for (b, s, m), c in self.step_costs.items()]
    with open(path, 'w') as f:
      json.dump(dict(appended=self.appended.tolist(),
                     criterion=self.criterion, margin=self.margin,
                     candidates=self.candidates, step_costs=costs), f,
                indent=1)

  @classmethod
  def load(cls, path: str) -> 'AutoK':
    """Reads what `save` wrote.

    The step costs in it hold for the machine that measured them.
    """
    with open(path) as f:
      data = json.load(f)
    costs = {(c['batch'], c['source_len'], c['max_len']):
             {int(k): v for k, v in c['seconds'].items()}
             for c in data['step_costs']}
    candidates = data['candidates']
    return cls(np.asarray(data['appended']), data['criterion'],
               data['margin'], candidates and tuple(candidates), costs)


def tune_k(decoder, inputs, *, max_len: int,
           criterion: decoding.Criterion = decoding.Exact(),
           batch_size: int = 8, margin: float = 0.05,
           candidates=None) -> AutoK:
  """Acceptance statistics for k='auto', from a decode at the largest k.

  Args:
    decoder: a `generate.Decoder` of the model (its compiled programs are
      reused).
    inputs: [examples, length] calibration inputs, like the ones to decode
      (e.g. training sources: not the data the decodes are judged on).
    max_len: most tokens to generate per example.
    criterion: the verification criterion the decodes will use.
    batch_size: examples decoded together here (no effect on the
      statistics).
    margin: the fraction of greedy's expected time blockwise decoding must
      save to be chosen.
    candidates: the block sizes to choose from (greedy always is one);
      None: every k up to the model's heads.

  Returns:
    AutoK; it measures this machine's step costs for each new batch shape
    it is asked about, and can be saved with `save`.
  """
  inputs = np.asarray(inputs)
  options = decoding.DecodeOptions(
      max_len=max_len, k=decoder.config.num_proposal_heads,
      criterion=criterion)
  appended = [np.asarray(decoder.decode(inputs[start:start + batch_size],
                                        options).block_sizes)
              for start in range(0, len(inputs), batch_size)]
  return AutoK(np.concatenate(appended), criterion.spec, margin, candidates)
