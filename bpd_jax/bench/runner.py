"""Greedy and blockwise decoding timed side by side, one row per setting.

For every batch size the runner
1. measures the step costs T(k) of every k in the sweep (`step_costs`: one
   model call) and the cost of one iteration of the decoding loop (model
   call, verification, bookkeeping: `Decoder.iteration_seconds`),
2. compiles every setting (timed: compile_s) and reads the compiled
   program's peak memory,
3. decodes all batches with every setting in turn, `repeats` rounds, so
   that greedy and blockwise runs interleave and share the machine's drifts;
   wall_s is the median round,
4. compares each setting's outputs with greedy's (identical fraction, and
   how many differences are floating-point near-ties) and scores them.

Speedup is greedy's median wall time over the setting's at the same batch
size; efficiency = speedup / (mean accepted block x T(1) / T(k)), the part of
the speedup the hardware allows that the implementation delivers. Where the
rest of the time goes: iteration_ms - step_cost_k_ms is the loop's own
work per iteration, fixed_ms what each decode call costs outside its loop
iterations (dispatch, encoder, prompt pass).
"""

import dataclasses
import statistics
import time
from typing import Callable, Sequence

import jax
import numpy as np

from bpd_jax import auto_k
from bpd_jax import decode_eval
from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.bench import step_costs
from bpd_jax.bench import near_ties

COLUMNS = (
    'decoder', 'k', 'criterion', 'min_block', 'batch_size', 'compile_s',
    'wall_s', 'tokens', 'tokens_per_s', 'model_calls', 'iterations',
    'mean_accepted_block', 'identical_to_greedy', 'differences',
    'near_tie_differences', 'quality', 'step_cost_1_ms', 'step_cost_k_ms',
    'iteration_ms', 'fixed_ms', 'speedup', 'efficiency', 'peak_memory_mb', 'memory_vs_greedy',
    'recompiles')


@dataclasses.dataclass(frozen=True)
class Setting:
  """One decoder configuration of the sweep.

  Attributes:
    decoder: 'greedy', 'blockwise' or 'auto' (blockwise with k='auto').
    k: block size (blockwise).
    criterion: verification criterion spec ('exact', 'top-k:2', ...).
    min_block: minimum block size l.
  """
  decoder: str
  k: int = 1
  criterion: str = 'exact'
  min_block: int = 1

  @property
  def name(self) -> str:
    if self.decoder != 'blockwise':
      return self.decoder
    extra = '' if self.criterion == 'exact' else f' {self.criterion}'
    extra += f' l={self.min_block}' if self.min_block > 1 else ''
    return f'k={self.k}{extra}'

  def run(self, decoder: generate.Decoder, inputs, max_len: int,
          tuning: auto_k.AutoK | None) -> decoding.DecodeResult:
    k = {'greedy': 0, 'auto': 'auto'}.get(self.decoder, self.k)
    return decode_eval.DecoderSpec(k, self.criterion, self.min_block).run(
        decoder, inputs, max_len, tuning)


def sweep(ks: Sequence[int], criteria: Sequence[str] = ('exact',),
          min_blocks: Sequence[int] = (1,), auto: bool = True) -> list[Setting]:
  """Greedy first (the reference), every blockwise combination, then auto."""
  for spec in criteria:
    decoding.from_spec(spec)  # A bad spec fails here, before any work.
  settings = [Setting('greedy')]
  settings += [Setting('blockwise', k, criterion, min_block)
               for criterion in criteria for min_block in min_blocks
               for k in ks if min_block <= k]
  return settings + ([Setting('auto')] if auto else [])


def run(decoder: generate.Decoder,
        batches: dict[int, list[tuple[np.ndarray, int]]],
        settings: Sequence[Setting], *, max_len: int, repeats: int = 3,
        tuning: auto_k.AutoK | None = None,
        quality: Callable[[np.ndarray], float] | None = None,
        progress: Callable[[str], None] = print) -> list[dict]:
  """Benchmarks every setting at every batch size.

  Args:
    decoder: the model's Decoder.
    batches: {batch size: [(inputs [batch, length], real rows), ...]}, the
      same examples at every batch size (the last batch filled up).
    settings: from `sweep`; greedy first.
    max_len: most tokens generated per example.
    repeats: timed rounds over all batches per setting.
    tuning: for the 'auto' setting (`generate.tune_k`); it measures its own
      loop costs while the setting compiles.
    quality: tokens [examples, max_len] -> a quality score (e.g. BLEU).
    progress: one line per step of the run.

  Returns:
    One dict per (batch size, setting), keys COLUMNS.
  """
  if not settings or settings[0].decoder != 'greedy':
    raise ValueError('the first setting must be greedy (the reference).')
  if any(s.decoder == 'auto' for s in settings) and tuning is None:
    raise ValueError("the 'auto' setting needs a tuning (generate.tune_k).")
  rows = []
  for batch_size, batch_list in batches.items():
    rows += _run_batch_size(decoder, batch_size, batch_list, settings,
                            max_len, repeats, tuning, quality, progress)
  return rows


def _run_batch_size(decoder, batch_size, batch_list, settings, max_len,
                    repeats, tuning, quality, progress):
  """The rows of one batch size."""
  model = decoder.model
  source_len = batch_list[0][0].shape[1]
  ks = sorted({1, *(s.k for s in settings if s.decoder == 'blockwise'),
               *((tuning.candidates or range(1, tuning.max_k + 1))
                 if tuning else ())})
  progress(f'batch {batch_size}: step costs T(k) for k = {ks}')
  costs = step_costs.measure_all(model, ks, batch_size=batch_size,
                                 source_len=source_len, max_len=max_len)
  loop = {k: decoder.iteration_seconds(k, batch_size, source_len, max_len)
          for k in ks}

  compiled = {}
  for i, setting in enumerate(settings):
    progress(f'batch {batch_size}: compiling {setting.name} '
             f'({i + 1}/{len(settings)})')
    compiled[setting] = _compile(decoder, setting, batch_list[0][0],
                                 max_len, tuning)

  times = {setting: [] for setting in settings}
  results = {}
  for round_ in range(repeats):
    progress(f'batch {batch_size}: timed round {round_ + 1}/{repeats}')
    for setting in settings:
      before = decoder.compilations()
      begin = time.perf_counter()
      results[setting] = [setting.run(decoder, inputs, max_len, tuning)
                          for inputs, _ in batch_list]
      jax.block_until_ready(results[setting])
      times[setting].append(time.perf_counter() - begin)
      compiled[setting]['recompiles'] += (
          decoder.compilations() - before)

  inputs = np.concatenate([inputs[:real] for inputs, real in batch_list])
  greedy = settings[0]
  reference = _outputs(results[greedy], batch_list)
  greedy_wall = statistics.median(times[greedy])
  rows = []
  for setting in settings:
    tokens, lengths, calls, iterations, block_k = _outputs(
        results[setting], batch_list)
    k = block_k  # Greedy, and auto where it chose greedy: 1.
    wall = statistics.median(times[setting])
    differ, ties = near_ties.count_differences(model, inputs, reference[0],
                                               tokens)
    block = lengths.sum() / max(calls, 1)
    speedup = greedy_wall / wall
    bound = block * costs[1] / costs[k] if costs[k] else float('nan')
    info = compiled[setting]
    rows.append(dict(
        decoder=setting.decoder, k=k, criterion=setting.criterion,
        min_block=setting.min_block, batch_size=batch_size,
        compile_s=round(info['compile_s'], 3), wall_s=round(wall, 6),
        tokens=int(lengths.sum()),
        tokens_per_s=round(float(lengths.sum()) / wall, 1),
        model_calls=int(calls), iterations=int(iterations),
        mean_accepted_block=round(float(block), 3),
        identical_to_greedy=round(1 - differ / len(tokens), 4),
        differences=differ, near_tie_differences=ties,
        quality=None if quality is None else round(quality(tokens), 2),
        step_cost_1_ms=_significant(costs[1] * 1e3),
        step_cost_k_ms=_significant(costs[k] * 1e3),
        iteration_ms=_significant(loop[k] * 1e3),
        fixed_ms=_significant(
            (wall - (iterations - len(batch_list)) * loop[k])
            / len(batch_list) * 1e3),
        speedup=round(speedup, 3),
        efficiency=round(float(speedup / bound), 3),
        peak_memory_mb=_significant(info['memory'] / 2**20),
        memory_vs_greedy=round(info['memory'] / compiled[greedy]['memory'],
                               3),
        recompiles=info['recompiles']))
    progress(f'batch {batch_size}: {setting.name:<20} {wall:8.3f} s  '
             f'speedup {speedup:5.2f}  block {block:5.2f}  '
             f'efficiency {rows[-1]["efficiency"]:5.2f}')
  return rows


def _significant(value: float, digits: int = 4) -> float:
  return float(f'{value:.{digits}g}')


def _compile(decoder, setting, inputs, max_len, tuning) -> dict:
  """Compiles the setting's decoder (timed) and reads its peak memory."""
  begin = time.perf_counter()
  result = setting.run(decoder, inputs, max_len, tuning)
  jax.block_until_ready(result)
  first = time.perf_counter() - begin
  begin = time.perf_counter()
  jax.block_until_ready(setting.run(decoder, inputs, max_len, tuning))
  compile_s = max(first - (time.perf_counter() - begin), 0.0)
  k = result.block_sizes.shape[1] - 1
  if setting.decoder == 'greedy' or (setting.decoder == 'auto' and k == 1):
    memory = generate.memory_bytes(decoder.model, inputs, max_len=max_len)
  else:
    memory = generate.memory_bytes(
        decoder.model, inputs, max_len=max_len, k=k,
        criterion=decoding.from_spec(setting.criterion),
        min_block=setting.min_block)
  return dict(compile_s=compile_s, memory=memory, recompiles=0)


def _outputs(results, batch_list):
  """(tokens, lengths, example calls, batch iterations, k) of real rows."""
  tokens = np.concatenate([np.asarray(r.tokens)[:real]
                           for r, (_, real) in zip(results, batch_list)])
  lengths = np.concatenate([np.asarray(r.lengths)[:real]
                            for r, (_, real) in zip(results, batch_list)])
  calls = sum(int(np.asarray(r.model_calls)[:real].sum())
              for r, (_, real) in zip(results, batch_list))
  iterations = sum(int(r.iterations) for r in results)
  return tokens, lengths, calls, iterations, results[0].block_sizes.shape[1] - 1
