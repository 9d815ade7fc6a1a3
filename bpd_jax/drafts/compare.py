"""Plain and refined drafts decoded and timed side by side.

For every k, greedy decoding, plain blockwise decoding and each refinement
decode the same batches, interleaved round after round (so they share the
machine's drifts), and the median round is kept (the evaluation harness,
`evaluation.run`). Block efficiency (tokens per model call) says how much
a refinement saves in calls; wall_s and the speedups say whether the
saving survives the refinement's own cost (the lattice search, the
rescorer, and the p drafts' tree scored in each call). `compare` is the
draft job's third step.
"""

from typing import Callable, Sequence

import numpy as np

from bpd_jax import decoding
from bpd_jax import evaluation
from bpd_jax import generate
from bpd_jax.decoding import refine
from bpd_jax.evaluation import DecoderSpec
from bpd_jax.tasks import batching

COLUMNS = ('decoder', 'k', 'mean_block', 'block_gain', 'wall_s',
           'speedup_vs_plain', 'speedup_vs_greedy', 'identical_to_greedy')


def compare(decoder: generate.Decoder, sources: Sequence[Sequence[int]],
            drafts_config, refinements: Sequence[refine.Refinement],
            rescorers: dict, *, max_len: int,
            progress: Callable[[str], None] = print) -> dict:
  """Greedy, then for each k in drafts.ks plain blockwise decoding and
  each refinement, on `sources`, drafts.batch_size at a time, timed over
  drafts.repeats interleaved rounds.

  Args:
    decoder: the model's Decoder.
    sources: the inputs to decode.
    drafts_config: the config's `drafts` section (ks, refinements as
      written, batch_size, repeats).
    refinements: drafts.refinements parsed (`checks.check`), in order.
    rescorers: {'ngram': NgramModel, 'neural': LM} as they need.
    max_len: most tokens generated per source.
    progress: one line per step.

  Returns:
    dict(batch_size, repeats, rows: `run`'s rows).
  """
  d = drafts_config
  batches = list(batching.eval_batches(sources, d.batch_size,
                                       decoder.config.max_source_len,
                                       pad_id=decoder.config.pad_id))
  chosen = variants(d.ks, list(zip(d.refinements, refinements)),
                    max_len=max_len)
  rows = run(decoder, batches, chosen, rescorers, repeats=d.repeats,
             progress=progress)
  return dict(batch_size=d.batch_size, repeats=d.repeats, rows=rows)


def variant(k: int, spec: str = '',
            refinement: refine.Refinement | None = None, *,
            max_len: int) -> DecoderSpec:
  """A blockwise decoder of the comparison: plain ('k=3 plain'), or refined
  by `refinement` (parsed from `spec`: 'k=3 ngram:...', see
  `decoding.Refinement.from_spec`), `max_len` tokens an example."""
  return DecoderSpec(
      decoding.DecodeOptions(max_len=max_len, k=k, refinement=refinement),
      name=f'k={k} ' + (spec or 'plain'), refinement_spec=spec)


def variants(ks: Sequence[int],
             refinements: Sequence[tuple[str, refine.Refinement]], *,
             max_len: int) -> list[DecoderSpec]:
  """Greedy, then per k plain blockwise and every refinement."""
  out = [DecoderSpec(decoding.DecodeOptions(max_len=max_len), 'greedy')]
  for k in ks:
    out.append(variant(k, max_len=max_len))
    out += [variant(k, spec, r, max_len=max_len) for spec, r in refinements]
  return out


def run(decoder: generate.Decoder, batches: list[tuple[np.ndarray, int]],
        chosen: Sequence[DecoderSpec], rescorers: dict, *,
        repeats: int, progress: Callable[[str], None] = print) -> list[dict]:
  """Decodes every batch with every variant, `repeats` interleaved rounds.

  Args:
    decoder: the model's Decoder.
    batches: [(inputs [batch, length], real rows)].
    chosen: from `variants`; greedy first.
    rescorers: {'ngram': NgramModel, 'neural': LM} as the refinements need.
    repeats: timed rounds.
    progress: one line per step.

  Returns:
    one dict per variant (COLUMNS and more).
  """
  measured = evaluation.run(decoder, batches, chosen, repeats=repeats,
                            rescorers=rescorers,
                            progress=progress)
  reference, greedy_wall = measured[0].outputs.tokens, measured[0].wall_s
  plain = {}
  rows = []
  for run_ in measured:
    spec, out, wall = run_.spec, run_.outputs, run_.wall_s
    block, blockwise = out.mean_block, spec.kind == 'blockwise'
    if blockwise and not spec.refinement_spec:
      plain[spec.k] = (block, wall)
    base_block, base_wall = plain.get(spec.k, (block, wall))
    refinement = spec.refinement
    rows.append(dict(
        decoder=spec.name, k=max(spec.k, 1),
        refinement=spec.refinement_spec or None,
        drafts=refinement.drafts if refinement else 1,
        top_t=refinement.top_t if refinement else 1,
        rescorer=refinement.rescorer if refinement else None,
        weight=refinement.weight if refinement else None,
        tokens=int(out.lengths.sum()), model_calls=out.example_calls,
        mean_block=round(block, 3),
        block_gain=round(block / base_block - 1, 4) if blockwise else None,
        wall_s=round(wall, 6), walls=[round(t, 6) for t in run_.walls],
        tokens_per_s=round(float(out.lengths.sum()) / wall, 1),
        speedup_vs_plain=round(base_wall / wall, 3) if blockwise else None,
        speedup_vs_greedy=round(greedy_wall / wall, 3),
        identical_to_greedy=round(float(
            (out.tokens == reference).all(axis=1).mean()), 4),
        compile_s=round(run_.compile_s, 2)))
    progress(f'{spec.name:<28} block {block:6.3f}  wall {wall:7.3f} s')
  return rows
