"""Sequence-level distillation: a trained model translates its training set.

`distill` takes a trained model and its task (`jobs.load`), decodes every
training source greedily and writes a plain-text parallel corpus to
OUTPUT_DIR: train.src / train.tgt (the sources and the model's
translations), plus the other splits of the task unchanged (their
references stay human/original), so that a config trains on it with
task.name='parallel_text' (configs/demo.py has the option
`distilled=OUTPUT_DIR`). Distilled targets are more predictable, which the
paper found makes blockwise heads accept longer blocks.

A language model (a task of kind 'lm') continues each training prompt
instead, and OUTPUT_DIR gets train.npz (prompt and continuation ids) and
distilled.json; its config's `distilled=OUTPUT_DIR` trains on them
(configs/lm_demo.py), the held-out splits staying the real text.

OUTPUT_DIR must be new or empty (`check_output_dir`; with `overwrite` the
corpus files in a directory that holds some are replaced) and is never a
directory the job reads (its workdir, the task's data or corpus):
distilling a corpus into itself would leave empty files. The corpus's
files are written under temporary names and renamed into place together
once all are complete, so a failed or killed job leaves the previous
corpus (or none), never half of one.
"""

import json
import os

import jax
import numpy as np

from bpd_jax import generate
from bpd_jax import tasks
from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors
from bpd_jax.infra import sharding
from bpd_jax.tasks import batching
from bpd_jax.tasks.lm import task as task_lib

SOURCE_SUFFIX, TARGET_SUFFIX = 'src', 'tgt'


def distill(config, model, task, output_dir: str, log=print,
            batch_size: int = 64, source: str = '') -> dict:
  """Writes the distilled corpus; returns {split: number of pairs}.

  Args:
    config: the trained run's config, checked by config_checks
      (eval.max_len, mesh).
    model: the trained Transformer (`jobs.load`).
    task: its task: the training sources decoded, the other splits copied.
    output_dir: where the corpus goes.
    log: progress lines go here.
    batch_size: sentences decoded together (greedy decoding gives each
      sentence the output it would have alone; eval.batch_size, often 1
      for timing, would make a large corpus take many times longer).
    source: the run's workdir, recorded in the corpus's distilled.json.

  The job checks output_dir first (`check_output_dir`); this function
  writes over the corpus files there.

  Raises:
    ValueError: batch_size < 1, or an image task (`refuse_images`).
    errors.DataError: every translation is empty (no corpus is written).
    errors.WriteError: the corpus could not be written (the previous one,
      if any, is intact).
  """
  if batch_size < 1:
    raise ValueError(f'--batch_size={batch_size} must be >= 1.')
  refuse_images(config)
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  # Parameters split as mesh.param_rules say: a model that does not fit
  # one device distils as it trained.
  decoder = generate.Decoder(model, mesh=mesh,
                             param_rules=config.mesh.param_rules, log=log)
  distill_kind = (_distill_lm if tasks.get(config.task.name).kind == 'lm'
                  else _distill_text)
  return distill_kind(config, model, task, output_dir, log, batch_size,
                      decoder, source)


def _distill_text(config, model, task, output_dir, log, batch_size, decoder,
                  source):
  """A text task's distilled corpus: each training source and the model's
  greedy translation of it (pairs whose translation is empty are left
  out), the other splits as they are."""
  pairs = task.pairs('train')
  sources, truncated = task.sources('train', model.config.max_source_len)
  if truncated:
    log(f'warning: {truncated} training sources exceed max_source_len='
        f'{model.config.max_source_len} and were cut before decoding.')
  translations = []
  batches = batching.eval_batches(sources, batch_size,
                                  model.config.max_source_len,
                                  pad_id=model.config.pad_id)
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
  if not distilled:
    raise errors.DataError(
        f'all {len(pairs)} translations are empty (the model ends every '
        f'sentence at once): no corpus was written; train the run longer.')
  corpus = {split: distilled if split == 'train' else task.pairs(split)
            for split in ('train', *task.splits)}
  counts = {split: len(pairs) for split, pairs in corpus.items()}
  if jax.process_index() == 0:
    _write_text_corpus(output_dir, corpus,
                       dict(vocab_fingerprint=task.vocab.fingerprint,
                            vocab_size=task.vocab.vocab_size,
                            examples=counts, source=source))
  log(f'Distilled corpus in {output_dir}: {counts}')
  return counts


def _distill_lm(config, model, task, output_dir, log, batch_size, decoder,
                source):
  """A language model's distilled training split: each training example's
  prompt (its own, or its first max_source_len tokens) and the model's
  greedy continuation of eval.max_len tokens (tasks/lm/task.py
  `write_distilled`; the task's `distilled` option reads it)."""
  max_source_len = model.config.max_source_len
  sources, truncated = task.sources('train', max_source_len)
  if truncated:
    log(f'warning: {truncated} training prompts exceed max_source_len='
        f'{max_source_len} and kept their end.')
  pairs = []
  for i, (inputs, real) in enumerate(batching.eval_batches(
      sources, batch_size, max_source_len, pad_id=model.config.pad_id)):
    result = decoder.greedy(inputs, max_len=config.eval.max_len)
    lengths = np.asarray(result.lengths)
    for row, tokens in enumerate(np.asarray(result.tokens)[:real]):
      prompt = sources[i * batch_size + row][1:]  # Without the start token.
      pairs.append((prompt, tokens[:lengths[row]]))
    if i % 100 == 0:
      log(f'  {len(pairs)}/{len(sources)} prompts')
  if jax.process_index() == 0:
    task_lib.write_distilled(output_dir, batching.EncodedPairs.from_pairs(
        pairs), task.vocab, source)
  log(f'Distilled corpus in {output_dir}: {len(pairs)} training examples.')
  return {'train': len(pairs)}


def refuse_images(config) -> None:
  """Raises ValueError for an image task: distillation writes text."""
  tasks.require_kind(config, ('text', 'lm'), job='distill')


def check_output_dir(config, workdir: str, output_dir: str,
                     overwrite: bool) -> None:
  """Refuses an output directory the job reads, or one that holds files
  (without `overwrite`), before any decoding.

  Raises:
    errors.DataError: the directory is one the job reads (its workdir, the
      task's data_dir, root, distilled corpus or vocabulary's folder).
    errors.WorkdirError: it holds files and `overwrite` is False, or it is
      a file.
  """
  inputs = {'--workdir': workdir}
  for field in ('data_dir', 'root', 'distilled', 'vocab_path'):
    value = config.task.get(field) or ''
    if field == 'vocab_path' and value and not os.path.isdir(value):
      value = os.path.dirname(value) or '.'  # A model file: its folder.
    if value:
      inputs[f'task.{field}'] = value
  for name, directory in inputs.items():
    if os.path.realpath(directory) == os.path.realpath(output_dir):
      raise errors.DataError(
          f'--output_dir={output_dir} is {name} ({directory}), which this '
          f'job reads: distilling into it would overwrite its own input. '
          f'Give another directory.')
  if os.path.exists(output_dir) and not os.path.isdir(output_dir):
    raise errors.WorkdirError(f'--output_dir={output_dir} is a file, not a '
                              f'directory.')
  held = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
  if held and not overwrite:
    shown = ', '.join(held[:4]) + (', ...' if len(held) > 4 else '')
    raise errors.WorkdirError(
        f'--output_dir={output_dir} already holds {len(held)} file(s) '
        f'({shown}): give a new or empty directory, or --overwrite to '
        f'replace the corpus files there.')


def _write_text_corpus(directory: str, corpus: dict, info: dict) -> None:
  """{split}.src / {split}.tgt of each split's (source, target) pairs and
  distilled.json (what made them), renamed into place together once all
  are written (`atomic_files.replacing_all`)."""
  files = {os.path.join(directory, f'{split}.{suffix}'): (pairs, column)
           for split, pairs in corpus.items()
           for suffix, column in ((SOURCE_SUFFIX, 0), (TARGET_SUFFIX, 1))}
  info_path = os.path.join(directory, task_lib.DISTILLED_INFO)
  with atomic_files.replacing_all([*files, info_path]) as temps:
    for temp, (pairs, column) in zip(temps, files.values()):
      with open(temp, 'w', encoding='utf-8') as f:
        f.writelines(pair[column] + '\n' for pair in pairs)
    with open(temps[-1], 'w', encoding='utf-8') as f:
      json.dump(info, f, indent=1)
