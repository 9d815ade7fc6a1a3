"""Sequence-level distillation: a trained model translates its training set.

    python -m bpd_jax.distill --config=configs/demo.py --workdir=/tmp/bpd_demo \
        --output_dir=/tmp/bpd_distilled

Restores the latest checkpoint of WORKDIR, decodes every training source
greedily and writes a plain-text parallel corpus to OUTPUT_DIR: train.src /
train.tgt (the sources and the model's translations), plus the other splits
of the task unchanged (their references stay human/original), so that a
config trains on it with task.name='parallel_text' (configs/demo.py has the
option `distilled=OUTPUT_DIR`). Distilled targets are more predictable, which
the paper found makes blockwise heads accept longer blocks.

A language model (a task of kind 'lm') continues each training prompt
instead, and OUTPUT_DIR gets train.npz (prompt and continuation ids) and
distilled.json; its config's `distilled=OUTPUT_DIR` trains on them
(configs/lm_demo.py), the held-out splits staying the real text.
"""

import os

import jax
import numpy as np
from absl import flags
from absl import logging

from bpd_jax import generate
from bpd_jax import jobs
from bpd_jax import sharding
from bpd_jax import tasks
from bpd_jax.tasks import batching
from bpd_jax.tasks.lm import task as task_lib

SOURCE_SUFFIX, TARGET_SUFFIX = 'src', 'tgt'


def distill(config, model, task, output_dir: str, log=print,
            batch_size: int = 64) -> dict:
  """Writes the distilled corpus; returns {split: number of pairs}.

  Args:
    config: the trained run's config (eval.max_len, mesh).
    model: the trained Transformer (`jobs.load`).
    task: its task: the training sources decoded, the other splits copied.
    output_dir: where the corpus goes.
    log: progress lines go here.
    batch_size: sentences decoded together (greedy decoding gives each
      sentence the output it would have alone; eval.batch_size, often 1
      for timing, made Multi30k's 29,000 sources take 20 minutes).
  """
  if batch_size < 1:
    raise ValueError(f'--batch_size={batch_size} must be >= 1.')
  refuse_images(config)
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  if tasks.get(config.task.name).kind == 'lm':
    return _distill_lm(config, model, task, output_dir, log, batch_size, mesh)
  pairs = task.pairs('train')
  sources, truncated = task.sources('train', model.config.max_source_len)
  if truncated:
    log(f'warning: {truncated} training sources exceed max_source_len='
        f'{model.config.max_source_len} and were cut before decoding.')
  translations = []
  batches = batching.eval_batches(sources, batch_size,
                                  model.config.max_source_len)
  decoder = generate.Decoder(model, mesh=mesh)
  for i, (inputs, real) in enumerate(batches):
    result = decoder.greedy(inputs, max_len=config.eval.max_len)
    tokens = np.asarray(result.tokens)[:real]
    translations += [task.vocab.decode(row) for row in tokens]
    if i % 100 == 0:
      log(f'  {len(translations)}/{len(pairs)} sentences')
  empty = sum(not t.strip() for t in translations)
  if empty:
    log(f'warning: {empty} translations are empty; their pairs are left out.')
  distilled = [(s, t) for (s, _), t in zip(pairs, translations) if t.strip()]
  counts = {'train': len(distilled)}
  if jax.process_index() == 0:
    os.makedirs(output_dir, exist_ok=True)
    _write(output_dir, 'train', distilled)
    for split in task.splits:
      if split != 'train':
        _write(output_dir, split, task.pairs(split))
        counts[split] = len(task.pairs(split))
  log(f'Distilled corpus in {output_dir}: {counts}')
  return counts


def _distill_lm(config, model, task, output_dir, log, batch_size, mesh):
  """A language model's distilled training split: each training example's
  prompt (its own, or its first max_source_len tokens) and the model's
  greedy continuation of eval.max_len tokens (tasks/lm/task.py
  `write_distilled`; the task's `distilled` option reads it)."""
  max_source_len = model.config.max_source_len
  sources, truncated = task.sources('train', max_source_len)
  if truncated:
    log(f'warning: {truncated} training prompts exceed max_source_len='
        f'{max_source_len} and kept their end.')
  decoder = generate.Decoder(model, mesh=mesh)
  pairs = []
  for i, (inputs, real) in enumerate(batching.eval_batches(
      sources, batch_size, max_source_len)):
    result = decoder.greedy(inputs, max_len=config.eval.max_len)
    lengths = np.asarray(result.lengths)
    for row, tokens in enumerate(np.asarray(result.tokens)[:real]):
      prompt = sources[i * batch_size + row][1:]  # Without the start token.
      pairs.append((prompt, tokens[:lengths[row]]))
    if i % 100 == 0:
      log(f'  {len(pairs)}/{len(sources)} prompts')
  if jax.process_index() == 0:
    task_lib.write_distilled(output_dir, batching.EncodedPairs.from_pairs(
        pairs), task.vocab.vocab_size)
  log(f'Distilled corpus in {output_dir}: {len(pairs)} training examples.')
  return {'train': len(pairs)}


def refuse_images(config) -> None:
  """Raises ValueError for an image task: distillation writes text."""
  tasks.require_kind(config, ('text', 'lm'), job='distill')


def _write(directory, split, pairs):
  for suffix, column in ((SOURCE_SUFFIX, 0), (TARGET_SUFFIX, 1)):
    path = os.path.join(directory, f'{split}.{suffix}')
    with open(path + '.partial', 'w', encoding='utf-8') as f:
      f.writelines(pair[column] + '\n' for pair in pairs)
    os.replace(path + '.partial', path)


_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Directory for the distilled parallel corpus.')
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 64, 'Training sources decoded together (the output of '
    'each is the one it has alone).')

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir.


def main(argv):
  job = jobs.setup(argv, init='checkpoint', check=refuse_images)
  logging.info('Distilling %s into %s', job.workdir, _OUTPUT_DIR.value)
  distill(job.config, job.model, job.task, _OUTPUT_DIR.value,
          batch_size=_BATCH_SIZE.value)


if __name__ == '__main__':
  jobs.run(main, 'output_dir')
