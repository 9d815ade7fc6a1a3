"""Translation pairs from TFDS (WMT14 En->De), read without TensorFlow.

The input library is `tfds.data_source` (random access to the ArrayRecord
files that `tfds build --file_format=array_record` writes) with the
project's own numpy batching (tasks/batching.py), rather than tf.data or
Grain, for these reasons:
- tf.data needs TensorFlow: tensorflow-cpu would more than double the
  install of JAX, Flax, Optax and Orbax, and bring a second runtime
  competing with JAX for the host's cores.
- Grain would add a dependency whose shuffle / shard / batch steps are a
  few lines of numpy over random access; its worker processes need absl
  flags parsed and a __main__ guard, and its checkpointable iterator state
  solves a problem we do not have: our batch of step s is a pure function
  of (seed, s), so a resume needs no iterator state.
- tfds.data_source reads a record in well under a millisecond and
  SentencePiece encodes short sentences by the hundred thousand a second,
  so a process reads and encodes its shard of the millions of WMT14 pairs
  once (minutes on one host, a fraction of that on each of several),
  keeps it as flat int32 arrays, and saves it in the workdir
  (WORKDIR/data/) so that a resumed run starts in seconds.

The 'tfds_translation' task's section, besides name, max_source_len and
max_target_len:
  dataset: TFDS 'name/config', e.g. 'wmt14_translate/de-en'.
  data_dir: where `tfds build` prepared it.
  splits: {our split: TFDS split}, must include 'train'.
  source_lang, target_lang: the features of the two sentences.
  vocab_size, vocab_sample, vocab_path: the SentencePiece vocabulary,
    trained on vocab_sample seeded training pairs (saved in the workdir,
    reused on resume), or an existing model.
  mock_examples: optional, 0 (the default: the dataset), or N: TFDS mock
    data of N random pairs a split.
Training reads it in token-count batches (train.tokens_per_batch > 0).

Each process reads only its own contiguous shard of the training split
(jax.process_index() of jax.process_count()); eval splits (newstest2013 is
'validation', newstest2014 'test' in wmt14_translate) are small and read
whole. Everything that can be wrong with the data dir, the dataset or a
split name raises before any reading or training starts.
"""

import os
import re
from collections.abc import Mapping

import numpy as np
from absl import logging

from bpd_jax.tasks import batching
from bpd_jax.tasks import host_shards
from bpd_jax.tasks import spec
from bpd_jax.tasks import tfds_builders
from bpd_jax.tasks.checks import at_least, needs_train_split
from bpd_jax.tasks.text import task as task_lib
from bpd_jax.tasks.text import vocab as vocab_lib

_READ_CHUNK = 10_000  # Pairs read and encoded at a time.
# The optional fields of the section (spec.TaskSpec.defaults): the real
# data.
DEFAULTS = dict(mock_examples=0)


def open_sources(dataset: str, data_dir: str, splits: Mapping[str, str],
                 source_lang: str, target_lang: str,
                 mock_examples: int = 0) -> dict[str, 'PairSource']:
  """{split: PairSource} of `dataset`'s TFDS splits ({name: TFDS split}).

  Args:
    dataset: 'name/config', e.g. 'wmt14_translate/de-en'.
    data_dir: where `tfds build` prepared it.
    splits: our split names -> the dataset's split names.
    source_lang: feature of the source sentence ('en').
    target_lang: feature of the target sentence ('de').
    mock_examples: > 0: TFDS mock data (random text with the dataset's
      features, this many examples a split, no data dir needed), for
      trying the whole pipeline on a machine without the data.

  Raises:
    FileNotFoundError: data_dir does not exist, or the dataset is not
      prepared there (the message gives the `tfds build` command).
    ValueError: no such TFDS dataset, builder config or split.
  """
  # The sources opened inside keep serving mock data after it.
  with tfds_builders.opened(dataset, data_dir, splits.values(),
                            mock_examples) as builder:
    return {name: PairSource(builder, split, source_lang, target_lang)
            for name, split in splits.items()}


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


class PairSource:
  """Random access to the (source, target) sentences of one split."""

  def __init__(self, builder, split: str, source_lang: str,
               target_lang: str):
    self.split = split
    self._data = builder.as_data_source(split=split)
    self._langs = (source_lang, target_lang)
    if not len(self._data):  # Stop before any work, not at evaluation.
      raise ValueError(f'split {split!r} of {builder.info.full_name} has no '
                       f'examples.')
    missing = set(self._langs) - set(self._data[0])
    if missing:
      raise ValueError(f'{builder.info.full_name} examples have no '
                       f'{sorted(missing)}; features: '
                       f'{sorted(self._data[0])}.')

  def __len__(self) -> int:
    return len(self._data)

  def __getitem__(self, index: int) -> tuple[str, str]:
    example = self._data[int(index)]
    return tuple(_text(example[lang]).strip() for lang in self._langs)

  def pairs(self, indices=None) -> list[tuple[str, str]]:
    """The pairs at `indices` (all, in order, by default)."""
    return [self[i] for i in (range(len(self)) if indices is None
                              else indices)]

  def sample_sentences(self, num_pairs: int, seed: int) -> list[str]:
    """Sources and targets of `num_pairs` pairs drawn without replacement."""
    count = min(num_pairs, len(self)) if num_pairs else len(self)
    indices = np.random.default_rng(seed).choice(len(self), count,
                                                 replace=False)
    return [sentence for pair in self.pairs(np.sort(indices))
            for sentence in pair]


def encoded_shard(source: PairSource, vocab, process_index: int,
                  process_count: int,
                  cache_path: str | None = None) -> batching.EncodedPairs:
  """This process's shard of `source`, encoded and eos-ended.

  Read from `cache_path` when it exists (a resumed run); otherwise read,
  encoded and saved there.
  """
  if cache_path and os.path.exists(cache_path):
    return batching.EncodedPairs.load(cache_path)
  start, end = host_shards.shard_bounds(len(source), process_index,
                                        process_count)
  logging.info('Encoding pairs %d..%d of %s (process %d of %d).', start, end,
               source.split, process_index, process_count)
  eos = [vocab.eos_id]
  parts = []
  for first in range(start, end, _READ_CHUNK):
    pairs = source.pairs(range(first, min(first + _READ_CHUNK, end)))
    sources = vocab.encode_many([s for s, _ in pairs])
    targets = vocab.encode_many([t for _, t in pairs])
    parts.append(batching.EncodedPairs.from_pairs(
        (s + eos, t + eos) for s, t in zip(sources, targets)))
    logging.log_every_n_seconds(logging.INFO, 'encoded %d of %d pairs', 60,
                                first + len(pairs) - start, end - start)
  shard = batching.EncodedPairs.concatenate(parts)
  if cache_path:
    shard.save(cache_path)  # Atomically: a killed run leaves no half shard.
  return shard


def _check_section(task) -> None:
  needs_train_split(task, 'the vocabulary and training pairs come from it')
  if not isinstance(task.dataset, str) or task.dataset.count('/') != 1:
    raise ValueError(f'task.dataset={task.dataset!r} must be a TFDS '
                     f'"name/config", e.g. "wmt14_translate/de-en".')
  at_least(task, 'task', vocab_size=8, vocab_sample=0)


def _check(config) -> None:
  _check_section(config.task)
  if not config.train.tokens_per_batch:
    raise ValueError('task.name=\'tfds_translation\' reads a shard per '
                     'process and needs token-count batches: set '
                     'train.tokens_per_batch > 0.')


def _load(config, workdir: str,
          train_vocab: bool = True) -> task_lib.TextTask:
  """Sources opened (nothing read yet); the vocabulary found or trained."""
  _check_section(config)
  sources = open_sources(
      config.dataset, config.data_dir, config.splits, config.source_lang,
      config.target_lang, config.mock_examples)
  train = sources['train']
  vocab = vocab_lib.sentencepiece_vocab(
      config, workdir, train_vocab,
      lambda: train.sample_sentences(config.vocab_sample, seed=0))

  def train_shard(process_index, process_count):
    name = re.sub(r'[^\w.-]+', '_', f'{config.dataset}'
                  f'{".mock" if config.mock_examples else ""}'
                  f'.{train.split}')
    cache = os.path.join(workdir, 'data', f'{name}.{process_index}-of-'
                         f'{process_count}.npz')
    return encoded_shard(train, vocab, process_index, process_count, cache)

  readers = {split: source.pairs for split, source in sources.items()}
  return task_lib.TextTask(vocab, task_lib.LazySplits(readers), train_shard)


SPEC = spec.TaskSpec(name='tfds_translation', kind='text', load=_load,
                     check=_check, defaults=DEFAULTS)
