"""Decode an eval split with several decoders and compare them side by side.

Used by the evaluate job, by periodic evaluation during training and by the
main job's final table. Each decoder runs over the whole split after one
compilation; the report gives quality, mean accepted block size, model calls, wall-clock, speedup over greedy decoding
and the fraction of outputs identical to greedy's.

Quality is BLEU twice over, so that both kinds of published figure can be
compared: `bleu` is sacreBLEU on detokenized output against the raw
references (tokenize='13a', its signature printed beside the score: the
comparable modern figure); `bleu_intl` is tokenized BLEU as Tensor2Tensor's
t2t-bleu computes it, the convention of the papers of that code base (Stern
et al. 2018 among them): mteval-v14's international tokenization, which
sacreBLEU reproduces as tokenize='intl'. Neither splits German compounds,
as the Transformer paper's multi-bleu figures did (which raises them), so
those are not directly comparable.
"""

import dataclasses
import json
import os
import time

import jax
import numpy as np
import sacrebleu
import tabulate
from flax import nnx

from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax import sharding
from bpd_jax.tasks import batching

COLUMNS = ('decoder', 'bleu', 'mean_block', 'model_calls', 'wall_s',
           'speedup', 'identical_to_greedy')


@dataclasses.dataclass(frozen=True)
class DecoderSpec:
  """One decoder to compare: greedy (k = 0), blockwise, or k='auto'."""
  k: int | str = 0
  criterion: str = 'exact'
  min_block: int = 1

  @property
  def name(self) -> str:
    if not self.k:
      return 'greedy'
    extra = '' if self.criterion == 'exact' else f' {self.criterion}'
    extra += f' l={self.min_block}' if self.min_block > 1 else ''
    return f'blockwise k={self.k}{extra}'

  def run(self, decoder: generate.Decoder, sources, max_len,
          tuning=None):
    """Decodes `sources`; `tuning` (generate.tune_k) serves k='auto'."""
    if not self.k:
      return decoder.greedy(sources, max_len=max_len)
    return decoder.blockwise(
        sources, k=self.k, max_len=max_len,
        criterion=decoding.from_spec(self.criterion),
        min_block=self.min_block, tuning=tuning)


@dataclasses.dataclass(frozen=True)
class TimedRun:
  """One decoder over a whole eval set (see `timed_run`).

  Attributes:
    tokens: [examples, max_len] outputs, the batches' filler rows dropped.
    lengths: [examples] output lengths.
    model_calls: loop iterations over all batches (calls of the batch).
    mean_block: tokens per model call, per example, over the set.
    wall_s: seconds for all batches, after a first compiling call.
  """
  tokens: np.ndarray
  lengths: np.ndarray
  model_calls: int
  mean_block: float
  wall_s: float


def timed_run(spec: DecoderSpec, decoder: generate.Decoder, batches,
              max_len: int) -> TimedRun:
  """Decodes every batch of (inputs, real rows) with `spec`, timed.

  The first batch is decoded once before the clock starts, so the time is
  decoding, not compilation.
  """
  jax.block_until_ready(spec.run(decoder, batches[0][0], max_len))
  start = time.perf_counter()
  results = [(spec.run(decoder, inputs, max_len), real)
             for inputs, real in batches]
  jax.block_until_ready([r for r, _ in results])
  wall = time.perf_counter() - start
  lengths = np.concatenate([np.asarray(r.lengths)[:real]
                            for r, real in results])
  example_calls = sum(int(np.asarray(r.model_calls)[:real].sum())
                      for r, real in results)
  return TimedRun(
      tokens=np.concatenate([np.asarray(r.tokens)[:real]
                             for r, real in results]),
      lengths=lengths,
      model_calls=sum(int(r.iterations) for r, _ in results),
      mean_block=round(float(lengths.sum() / max(example_calls, 1)), 3),
      wall_s=wall)


def decoders_from_config(eval_config) -> list[DecoderSpec]:
  """Greedy first (the reference), then blockwise for each k in eval.ks
  and each criterion in eval.criteria."""
  return [DecoderSpec()] + [
      DecoderSpec(k, criterion, eval_config.min_block)
      for k in eval_config.ks for criterion in eval_config.criteria]


def bleu(hypotheses: list[str], references: list[str],
         tokenize: str = '13a') -> tuple[float, str]:
  """Corpus BLEU of detokenized text, and sacreBLEU's signature.

  tokenize='13a' is sacreBLEU's standard; 'intl' is the tokenized BLEU of
  t2t-bleu (see the module docstring).
  """
  metric = sacrebleu.metrics.BLEU(tokenize=tokenize)
  score = metric.corpus_score(hypotheses, [references]).score
  return score, str(metric.get_signature())


def evaluate(model, task, split: str, decoders: list[DecoderSpec], *,
             batch_size: int, max_len: int, num_examples: int = 0,
             mesh=None, log=print) -> dict:
  """Decodes `split` with every decoder; returns the report.

  Args:
    model: the Transformer.
    task: the Task (vocabulary and sentence pairs).
    split: split name, e.g. 'validation'.
    decoders: greedy must come first: it is the reference of the speedups
      and of identical_to_greedy.
    batch_size: sentences decoded together (a multiple of the mesh's data
      axis when a mesh is given).
    max_len: most tokens generated per sentence.
    num_examples: the first this many sentences (0: all).
    mesh: optional mesh to shard the batch over.
    log: progress messages go here.

  Returns:
    dict(split, examples, truncated_sources, bleu_signature,
    bleu_intl_signature, rows), a row per decoder.
  """
  if not decoders or decoders[0].k:
    raise ValueError('the first decoder must be greedy (k=0).')
  pairs = task.pairs(split)[:num_examples or None]
  sources, truncated = task.sources(split, model.config.max_source_len,
                                    num_examples)
  if truncated:
    log(f'warning: {truncated} of {len(sources)} {split} sources exceed '
        f'max_source_len={model.config.max_source_len} and were cut.')
  references = [target for _, target in pairs]
  batches = list(batching.eval_batches(sources, batch_size,
                                       model.config.max_source_len))
  decoder = generate.Decoder(model, mesh=mesh)
  rows, reference_tokens, greedy_wall = [], None, None
  for spec in decoders:
    run = timed_run(spec, decoder, batches, max_len)
    tokens, lengths, wall = run.tokens, run.lengths, run.wall_s
    hypotheses = [task.vocab.decode(row) for row in tokens]
    score, signature = bleu(hypotheses, references)
    score_intl, signature_intl = bleu(hypotheses, references, 'intl')
    if reference_tokens is None:
      reference_tokens, greedy_wall = tokens, wall
    rows.append(dict(
        decoder=spec.name, k=max(spec.k, 1), criterion=spec.criterion,
        min_block=spec.min_block, bleu=round(score, 2),
        bleu_intl=round(score_intl, 2),
        mean_block=run.mean_block, model_calls=run.model_calls,
        wall_s=round(wall, 3),
        tokens_per_s=round(float(lengths.sum()) / wall, 1),
        speedup=round(greedy_wall / wall, 3),
        identical_to_greedy=round(float(
            (tokens == reference_tokens).all(axis=1).mean()), 4)))
    log(f'  {spec.name}: BLEU {score:.2f}, mean block '
        f'{rows[-1]["mean_block"]}, {wall:.2f} s')
  return dict(split=split, examples=len(pairs), truncated_sources=truncated,
              bleu_signature=signature, bleu_intl_signature=signature_intl,
              rows=rows)


def placement(model, config, mesh, log=print):
  """(model, mesh) to decode config.eval.batch_size sentences at a time.

  A batch that splits over the mesh's data axis is sharded over it, the
  model replicated. One that does not (batch size 1, the paper's latency
  setting, on several devices) is decoded on one device per process: each
  process decodes the whole split alone, on its own replica of the model.
  """
  replicated = jax.device_put(model, jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec()))
  data_devices = mesh.shape[config.mesh.data_axis]
  if config.eval.batch_size % data_devices == 0:
    return replicated, mesh
  log(f'eval.batch_size={config.eval.batch_size} does not split over the '
      f'{data_devices} devices of the data axis: decoding on one device '
      f'per process.')
  graphdef, state = nnx.split(replicated)
  device = jax.local_devices()[0]
  state = jax.tree.map(
      lambda x: jax.device_put(x.addressable_data(0), device), state)
  return nnx.merge(graphdef, state), None


def report(config, workdir: str, model, task, log=print) -> dict:
  """Runs the comparison, prints the table, writes the JSON report."""
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  model, mesh = placement(model, config, mesh, log)
  log(f'Decoding {config.eval.split} ({config.eval.num_examples or "all"} '
      f'sentences) with {len(config.eval.ks) + 1} decoders:')
  result = evaluate(
      model, task, config.eval.split, decoders_from_config(config.eval),
      batch_size=config.eval.batch_size, max_len=config.eval.max_len,
      num_examples=config.eval.num_examples, mesh=mesh, log=log)
  if jax.process_index() == 0:
    path = os.path.join(workdir, f'eval_{config.eval.split}.json')
    with open(path, 'w') as f:
      json.dump(dict(result, config=config.to_dict()), f, indent=2)
    columns = COLUMNS
    if config.eval.get('tokenized_bleu'):
      columns = ('decoder', 'bleu', 'bleu_intl') + COLUMNS[2:]
    table = [[row[c] for c in columns] for row in result['rows']]
    log(tabulate.tabulate(table, headers=columns, tablefmt='github'))
    log(f'{result["examples"]} sentences of {config.eval.split}; BLEU: '
        f'{result["bleu_signature"]}' + (
            f'; bleu_intl (tokenized, as t2t-bleu): '
            f'{result["bleu_intl_signature"]}' if 'bleu_intl' in columns
            else '') + f'. Report: {path}')
  return result
