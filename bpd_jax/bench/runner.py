"""Greedy and blockwise decoding timed side by side, one row per setting.

For every batch size the runner
1. measures the step costs T(k) of every k in the sweep (`step_costs`: one
   model call) and the cost of one iteration of the decoding loop (model
   call, verification, bookkeeping: `timing.loop_iteration_seconds`),
2. compiles every setting (timed: compile_s) and decodes all batches with
   every setting in turn, `repeats` rounds, so that greedy and blockwise
   runs interleave and share the machine's drifts; wall_s is the median
   round (the evaluation harness, `evaluation.run`),
3. reads the peak memory of each setting's compiled program,
4. compares each setting's outputs with greedy's (identical fraction, and
   how many differences are floating-point near-ties) and scores them.

Sampling settings (`sweep(samplers=...)`): ancestral sampling, and
blockwise sampling at every k, per sampler; their speedup is over ancestral
sampling with the same sampler, their iteration cost that of the sampling
loop, and they have no greedy output to match (identical_to_greedy None).

Speedup is greedy's median wall time over the setting's at the same batch
size; efficiency = speedup / (mean accepted block x T(1) / T(k)), the part of
the speedup the hardware allows that the implementation delivers. Where the
rest of the time goes: iteration_ms - step_cost_k_ms is the loop's own
work per iteration, fixed_ms what each decode call costs outside its loop
iterations (dispatch, encoder, prompt pass).
"""

from typing import Callable, Sequence

import jax
import numpy as np
from flax import nnx

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax import evaluation
from bpd_jax import generate
from bpd_jax import timing
from bpd_jax.bench import memory
from bpd_jax.bench import near_ties
from bpd_jax.bench import step_costs
from bpd_jax.evaluation import DecoderSpec
from bpd_jax.evaluation.spec import SAMPLING_CRITERIA

COLUMNS = (
    'decoder', 'k', 'tree', 'criterion', 'min_block', 'sampler',
    'batch_size',
    'head_layer', 'head_params',
    'compile_s',
    'wall_s', 'tokens', 'tokens_per_s', 'model_calls', 'iterations',
    'mean_accepted_block', 'identical_to_greedy', 'differences',
    'near_tie_differences', 'quality', 'step_cost_1_ms', 'step_cost_k_ms',
    'iteration_ms', 'fixed_ms', 'speedup', 'efficiency', 'peak_memory_mb',
    'memory_vs_greedy', 'auto_iteration_ms',
    'recompiles')


def head_parameters(model) -> int:
  """Parameters of the proposal heads (or draft layer) beyond the base."""
  return sum(int(x.size) for x in jax.tree.leaves(
      nnx.state(model.heads, nnx.Param)))


def setting(k: int | str = 0, criterion: str = 'exact',
            min_block: int = 1, sampler: str = '',
            tree: str = '') -> DecoderSpec:
  """A decoder of the sweep, named as the bench names it: 'greedy',
  'auto', 'k=4 top-k:2 l=2', 'k=4 tree=2,2', 'ancestral temperature=0.7',
  'k=4 temperature=0.7'."""
  if k in (0, 'auto'):
    name = 'auto' if k else ('ancestral' if sampler else 'greedy')
  else:
    name = f'k={k}' + ('' if criterion == 'exact' else f' {criterion}') + (
        f' l={min_block}' if min_block > 1 else '') + (
            f' tree={tree}' if tree else '')
  name += f' {sampler}' if sampler else ''
  return DecoderSpec(k, criterion, min_block, name=name, sampler=sampler,
                     tree=tree)


def sweep(ks: Sequence[int], criteria: Sequence[str] = ('exact',),
          min_blocks: Sequence[int] = (1,), auto: bool = True,
          samplers: Sequence[str] = (),
          trees: Sequence[str] = ()) -> list[DecoderSpec]:
  """Greedy first (the reference), every blockwise combination, the trees
  (widths specs) at every k > 1 with exact verification, then auto; then
  per sampler its ancestral sampling (that sampler's reference) and
  blockwise sampling at every k with each criterion sampling takes."""
  for spec in criteria:
    decoding.from_spec(spec)  # A bad spec fails here, before any work.
  for spec in samplers:
    decoding.Sampler.from_spec(spec)
  settings = [setting()]
  settings += [setting(k, criterion, min_block)
               for criterion in criteria for min_block in min_blocks
               for k in ks if min_block <= k]
  for tree in trees:
    depth = len(tree.split(','))
    decoding.Tree.from_spec(tree, depth)  # A bad spec fails here too.
    settings += [setting(k, tree=tree) for k in ks if k > depth]
  settings += [setting('auto')] if auto else []
  for sampler in samplers:
    settings.append(setting(sampler=sampler))
    settings += [setting(k, criterion, sampler=sampler)
                 for criterion in criteria for k in ks
                 if criterion.split(':')[0] in SAMPLING_CRITERIA]
  return settings


def run(decoder: generate.Decoder,
        batches: dict[int, list[tuple[np.ndarray, int]]],
        settings: Sequence[DecoderSpec], *, max_len: int, repeats: int = 3,
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
    tuning: for the 'auto' setting (`auto_k.tune_k`); it measures its own
      loop costs while the setting compiles.
    quality: tokens [examples, max_len] -> a quality score (e.g. BLEU).
    progress: one line per step of the run.

  Returns:
    One dict per (batch size, setting), keys COLUMNS.
  """
  if not settings or settings[0].kind != 'greedy':
    raise ValueError('the first setting must be greedy (the reference).')
  if any(s.kind == 'auto' for s in settings) and tuning is None:
    raise ValueError("the 'auto' setting needs a tuning (auto_k.tune_k).")
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
  ks = sorted({1, *(s.k for s in settings if s.kind == 'blockwise'),
               *((tuning.candidates or range(1, tuning.max_k + 1))
                 if tuning else ())})
  progress(f'batch {batch_size}: step costs T(k) for k = {ks}')
  costs = step_costs.measure_all(model, ks, batch_size=batch_size,
                                 source_len=source_len, max_len=max_len)
  # Decoded first: each setting's first call compiles the program (its
  # compile_s), which the loop timings below then run with forced
  # iterations.
  measured = evaluation.run(
      decoder, batch_list, settings, max_len=max_len, repeats=repeats,
      tuning=tuning, progress=lambda line: progress(
          f'batch {batch_size}: {line}'))
  # What each setting decoded with (auto: what it chose for this shape).
  decoded = [_decoded(run.spec, tuning, (batch_size, source_len, max_len),
                      max_len) for run in measured]
  # One iteration of each decode's loop (a sampling loop's own warping and
  # draws included), and its program's peak memory.
  loop = {options: timing.loop_iteration_seconds(
      decoder, options, batch_size, source_len) for options in set(decoded)}
  peaks = {options: memory.peak_bytes(decoder, batch_list[0][0], options)
           for options in set(decoded)}

  inputs = np.concatenate([inputs[:real] for inputs, real in batch_list])
  reference = measured[0].outputs.tokens
  walls = {run.spec: run.wall_s for run in measured}
  rows = []
  for run, options in zip(measured, decoded):
    setting, out, wall = run.spec, run.outputs, run.wall_s
    k = out.k  # Greedy, and auto where it chose greedy: 1.
    tree = options.tree.spec if options.tree is not None else None
    if setting.sampling:  # Drawn tokens: no greedy output to match.
      differ = ties = identical = None
    else:
      differ, ties = near_ties.count_differences(model, inputs, reference,
                                                 out.tokens)
      identical = round(1 - differ / len(out.tokens), 4)
    iteration_s = loop[options]
    block = out.mean_block
    # Over greedy; a sampling setting over ancestral sampling, same sampler.
    speedup = walls[setting.reference(settings)] / wall
    # A tree's call scores its nodes: T(k) of a k-position call does not
    # bound it (its iteration_ms is its cost).
    cost_k = None if tree else costs[k]
    bound = block * costs[1] / cost_k if cost_k else float('nan')
    rows.append(dict(
        decoder=_kind(setting), k=k, tree=tree, criterion=setting.criterion,
        min_block=setting.min_block, sampler=setting.sampler or None,
        batch_size=batch_size, head_layer=model.config.head_layer,
        head_params=head_parameters(model),
        compile_s=round(run.compile_s, 3), wall_s=round(wall, 6),
        tokens=int(out.lengths.sum()),
        tokens_per_s=round(float(out.lengths.sum()) / wall, 1),
        model_calls=out.example_calls, iterations=out.iterations,
        mean_accepted_block=round(block, 3),
        identical_to_greedy=identical,
        differences=differ, near_tie_differences=ties,
        quality=None if quality is None else round(quality(out.tokens), 2),
        step_cost_1_ms=_significant(costs[1] * 1e3),
        step_cost_k_ms=None if cost_k is None else _significant(
            cost_k * 1e3),
        iteration_ms=_significant(iteration_s * 1e3),
        fixed_ms=_significant(
            (wall - (out.iterations - len(batch_list)) * iteration_s)
            / len(batch_list) * 1e3),
        speedup=round(speedup, 3),
        efficiency=None if cost_k is None else round(float(speedup / bound),
                                                     3),
        peak_memory_mb=_significant(peaks[options] / 2**20),
        memory_vs_greedy=round(peaks[options] / peaks[decoded[0]], 3),
        # What auto measured for each candidate at this shape and chose by
        # (its own timings, beside this table's): a wrong choice shows here.
        auto_iteration_ms=(_auto_costs(tuning, (batch_size, source_len,
                                                max_len))
                           if setting.kind == 'auto' else None),
        recompiles=run.recompiles))
    efficiency = rows[-1]['efficiency']
    progress(f'batch {batch_size}: {setting.name:<20} {wall:8.3f} s  '
             f'speedup {speedup:5.2f}  block {block:5.2f}  efficiency '
             f'{"-" if efficiency is None else f"{efficiency:5.2f}"}')
  return rows


def _decoded(setting: DecoderSpec, tuning, shape,
             max_len: int) -> decoding.DecodeOptions:
  """The options a setting decoded with; for auto, what it chose for this
  shape (a k, greedy, or a tree)."""
  if setting.kind != 'auto':
    return setting.options(max_len)
  choice = tuning.chosen(shape)
  criterion = decoding.from_spec(setting.criterion)
  if isinstance(choice, decoding.Tree):
    return decoding.DecodeOptions(max_len=max_len, k=choice.depth + 1,
                                  criterion=criterion, tree=choice)
  if choice == 1:
    return decoding.DecodeOptions(max_len=max_len)
  return decoding.DecodeOptions(max_len=max_len, k=choice,
                                criterion=criterion,
                                min_block=setting.min_block)


def _auto_costs(tuning, shape) -> dict:
  """{candidate: ms of one loop iteration} as k='auto' measured them ('1':
  greedy decoding, 'tree:...' a tree)."""
  return {auto_k.candidate_name(c): _significant(seconds * 1e3)
          for c, seconds in tuning.step_costs[shape].items()}


def _kind(setting: DecoderSpec) -> str:
  """The decoder column: 'greedy', 'blockwise', 'auto' or 'ancestral'."""
  return 'ancestral' if setting.sampling and not setting.k else setting.kind


def _significant(value: float, digits: int = 4) -> float:
  return float(f'{value:.{digits}g}')
