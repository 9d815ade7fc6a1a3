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

Sampling settings (`settings.sweep(samplers=...)`): ancestral sampling, and
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
from bpd_jax.evaluation.spec import AutoSpec, DecoderSpec

COLUMNS = (
    'decoder', 'k', 'tree', 'drafter', 'criterion', 'min_block', 'sampler',
    'batch_size',
    'head_layer', 'head_params',
    'compile_s',
    'wall_s', 'tokens', 'tokens_per_s', 'model_calls', 'iterations',
    'mean_accepted_block', 'identical_to_greedy', 'differences',
    'near_tie_differences', 'quality', 'step_cost_1_ms', 'step_cost_k_ms',
    'step_cost_ratio', 'iteration_ms', 'fixed_ms', 'speedup', 'efficiency',
    'peak_memory_mb', 'memory_vs_greedy', 'auto_iteration_ms',
    'recompiles')


def head_parameters(model) -> int:
  """Parameters of the proposal heads (or draft layer) beyond the base."""
  return sum(int(x.size) for x in jax.tree.leaves(
      nnx.state(model.heads, nnx.Param)))


def run(decoder: generate.Decoder,
        batches: dict[int, list[tuple[np.ndarray, int]]],
        settings: Sequence[DecoderSpec | AutoSpec], *,
        repeats: int = 3,
        quality: Callable[[np.ndarray], float] | None = None,
        progress: Callable[[str], None] = print) -> list[dict]:
  """Benchmarks every setting at every batch size.

  Args:
    decoder: the model's Decoder.
    batches: {batch size: [(inputs [batch, length], real rows), ...]}, the
      same examples at every batch size (the last batch filled up).
    settings: from `settings.sweep`, all of one max_len; greedy first.
      An AutoSpec measures its own loop costs while it compiles.
    repeats: timed rounds over all batches per setting.
    quality: tokens [examples, max_len] -> a quality score (e.g. BLEU).
    progress: one line per step of the run.

  Returns:
    One dict per (batch size, setting), keys COLUMNS in order.
  """
  if not settings or settings[0].kind != 'greedy':
    raise ValueError('the first setting must be greedy (the reference).')
  rows = []
  for batch_size, batch_list in batches.items():
    rows += _run_batch_size(
        decoder, batch_size, batch_list, settings,
        repeats=repeats, quality=quality,
        progress=lambda line, b=batch_size: progress(f'batch {b}: {line}'))
  return rows


def _run_batch_size(decoder, batch_size, batch_list, settings, *, repeats,
                    quality, progress) -> list[dict]:
  """The rows of one batch size: its measurements, then a row a setting."""
  model, max_len = decoder.model, settings[0].max_len
  source_len = batch_list[0][0].shape[1]
  ks = _step_cost_ks(settings)
  progress(f'step costs T(k) for k = {ks}')
  costs = step_costs.measure_all(model, ks, decoder.draft_vocab,
                                 batch_size=batch_size,
                                 source_len=source_len, max_len=max_len)
  # Decoded first: each setting's first call compiles the program (its
  # compile_s), which the loop timings below then run with forced
  # iterations.
  measured = evaluation.run(decoder, batch_list, settings, repeats=repeats,
                            progress=progress)
  # What each setting decoded with (auto: what it chose for this shape).
  decoded = [run.spec.decoded(batch_size, source_len)
             for run in measured]
  # One iteration of each decode's loop (a sampling loop's own warping and
  # draws included), and its program's peak memory.
  loop = {options: timing.loop_iteration_seconds(
      decoder, options, batch_size, source_len) for options in set(decoded)}
  peaks = {options: memory.peak_bytes(decoder, batch_list[0][0], options)
           for options in set(decoded)}
  inputs = np.concatenate([inputs[:real] for inputs, real in batch_list])
  walls = {run.spec: run.wall_s for run in measured}
  rows = []
  for run, options in zip(measured, decoded):
    spec, out = run.spec, run.outputs
    # A tree's call scores its nodes: T(k) of a k-position call does not
    # bound it (its iteration_ms is its cost).
    cost_k = None if options.tree is not None else costs[options.k]
    row = dict(
        batch_size=batch_size, head_layer=model.config.head_layer,
        head_params=head_parameters(model),
        **_setting_columns(spec, options),
        **_output_columns(model, inputs, measured[0], run, quality),
        **figures(wall_s=run.wall_s,
                  reference_wall_s=walls[spec.reference(settings)],
                  tokens=int(out.lengths.sum()), mean_block=out.mean_block,
                  iterations=out.iterations, decode_calls=len(batch_list),
                  iteration_s=loop[options], step_cost_1=costs[1],
                  step_cost_k=cost_k),
        peak_memory_mb=_significant(peaks[options] / 2**20),
        memory_vs_greedy=round(peaks[options] / peaks[decoded[0]], 3),
        # What auto measured for each candidate at this shape and chose by
        # (its own timings, beside this table's): a wrong choice shows here.
        auto_iteration_ms=(
            _auto_costs(spec.tuning, (batch_size, source_len, max_len))
            if isinstance(spec, AutoSpec) else None))
    rows.append({column: row[column] for column in COLUMNS})
    efficiency = row['efficiency']
    progress(f'{spec.name:<20} {row["wall_s"]:8.3f} s  speedup '
             f'{row["speedup"]:5.2f}  block {out.mean_block:5.2f}  '
             f'efficiency '
             f'{"-" if efficiency is None else f"{efficiency:5.2f}"}')
  return rows


def _step_cost_ks(settings) -> list[int]:
  """The k's whose step cost T(k) a row reads: greedy's 1, every fixed
  setting's k and every k auto may choose."""
  ks = {1}
  for spec in settings:
    if isinstance(spec, AutoSpec):
      ks.update(spec.tuning.candidates or range(1, spec.tuning.max_k + 1))
    else:
      ks.add(spec.k)
  return sorted(ks)


def _setting_columns(spec, options: decoding.DecodeOptions) -> dict:
  """What a row decoded with: its kind, k, tree, drafter (one needing no
  training; None: the heads), criterion, min_block and sampler (auto's k
  and tree those it chose)."""
  return dict(decoder=spec.kind, k=options.k,
              tree=options.tree.spec if options.tree is not None else None,
              drafter=(options.lookup.spec if options.lookup is not None
                       else None),
              criterion=spec.criterion, min_block=spec.min_block,
              sampler=spec.sampler or None)


def _output_columns(model, inputs, greedy: evaluation.Measurement,
                    run: evaluation.Measurement, quality) -> dict:
  """What a setting decoded, beside greedy decoding's outputs; a sampling
  setting has no greedy output to match (None)."""
  out = run.outputs
  differ = ties = identical = None
  if not run.spec.sampling:
    differ, ties = near_ties.count_differences(
        model, inputs, greedy.outputs.tokens, out.tokens)
    identical = round(1 - differ / len(out.tokens), 4)
  return dict(
      compile_s=round(run.compile_s, 3), model_calls=out.example_calls,
      iterations=out.iterations, mean_accepted_block=round(out.mean_block, 3),
      identical_to_greedy=identical, differences=differ,
      near_tie_differences=ties,
      quality=None if quality is None else round(quality(out.tokens), 2),
      recompiles=run.recompiles)


def figures(*, wall_s: float, reference_wall_s: float, tokens: int,
            mean_block: float, iterations: int, decode_calls: int,
            iteration_s: float, step_cost_1: float,
            step_cost_k: float | None) -> dict:
  """The timed columns of a row (see the module docstring).

  Args:
    wall_s: the setting's median round over all batches.
    reference_wall_s: its reference's (greedy decoding, or the ancestral
      sampling of its sampler).
    tokens: tokens generated over all batches.
    mean_block: tokens per model call.
    iterations: loop iterations over all batches.
    decode_calls: decode calls of a round (the batches).
    iteration_s: seconds of one loop iteration.
    step_cost_1, step_cost_k: seconds of a 1- and a k-position model call
      (step_cost_k None where no k-position call bounds the setting: a
      tree).

  Returns:
    wall_s, tokens, tokens_per_s, step_cost_1_ms, step_cost_k_ms,
    step_cost_ratio (T(k) / T(1): what a call of the drafter and the k
    positions costs in greedy calls), iteration_ms, fixed_ms (per decode
    call, outside its loop iterations after the first call), speedup and
    efficiency (speedup / (mean_block x T(1) / T(k)); None without
    step_cost_k).
  """
  speedup = reference_wall_s / wall_s
  bound = (mean_block * step_cost_1 / step_cost_k
           if step_cost_k is not None else None)
  return dict(
      wall_s=round(wall_s, 6), tokens=tokens,
      tokens_per_s=round(tokens / wall_s, 1),
      step_cost_1_ms=_significant(step_cost_1 * 1e3),
      step_cost_k_ms=(None if step_cost_k is None
                      else _significant(step_cost_k * 1e3)),
      step_cost_ratio=(None if step_cost_k is None
                       else round(step_cost_k / step_cost_1, 3)),
      iteration_ms=_significant(iteration_s * 1e3),
      fixed_ms=_significant(
          (wall_s - (iterations - decode_calls) * iteration_s)
          / decode_calls * 1e3),
      speedup=round(speedup, 3),
      efficiency=None if bound is None else round(speedup / bound, 3))


def _auto_costs(tuning: auto_k.AutoK, shape) -> dict:
  """{candidate: ms of one loop iteration} as k='auto' measured them ('1':
  greedy decoding, 'tree:...' a tree)."""
  return {auto_k.candidate_name(c): _significant(seconds * 1e3)
          for c, seconds in tuning.step_costs[shape].items()}


def _significant(value: float, digits: int = 4) -> float:
  return float(f'{value:.{digits}g}')
