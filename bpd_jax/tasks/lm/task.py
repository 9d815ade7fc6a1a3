"""A language-model task: (prompt, continuation) examples by split.

Every example is a prompt and the continuation that follows it, both token
ids: plain language modelling has empty prompts and a chunk of text as the
continuation; summarisation has the document (and a cue such as
"Summary:") as the prompt and the summary, eos-ended, as the continuation.
A decoder-only model trains on prompt + continuation with the loss on the
continuation only (`losses.decoder_only_sequence`).

Evaluation decodes from prompts: an example's own prompt, or, where it has
none, the first `eval_prompt_len` tokens of its continuation; the reference
is what follows. The decoder's input is the prompt behind the vocabulary's
bos_id (the token every training sequence starts from).

An LMTask serves what the jobs ask of a text task (the
`spec.TextualTask` protocol: vocab, pairs, sources, encoded,
train_examples), so training, evaluation, the bench, the draft analysis
and distillation read it the same way.
"""

import collections.abc
import dataclasses
import json
import os
from typing import Callable

import numpy as np

from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors
from bpd_jax.tasks import batching
from bpd_jax.tasks import host_shards
from bpd_jax.tasks.checks import eval_split
from bpd_jax.tasks.text import hf_vocab
from bpd_jax.tasks.text import vocab as vocab_lib


@dataclasses.dataclass
class LMTask:
  """(prompt, continuation) token ids by split, and their vocabulary.

  Attributes:
    vocab: decodes the ids.
    splits: {split: EncodedPairs of (prompt ids, continuation ids)}, read on
      first use (a `text.task.LazySplits` or a dict).
    eval_prompt_len: tokens of a prompt-less example's continuation that
      evaluation gives as the prompt.
    train_prompt_len: the prompt width of training batches: 0 where the
      training examples have no prompt (plain language modelling: no
      position is spent on one), else task.max_source_len.
  """
  vocab: vocab_lib.Vocabulary
  splits: collections.abc.Mapping[str, batching.EncodedPairs]
  eval_prompt_len: int
  train_prompt_len: int

  def encoded(self, split: str) -> batching.EncodedPairs:
    """The split's (prompt ids, continuation ids) examples."""
    if split not in self.splits:
      raise ValueError(f'split {split!r} is not one of {sorted(self.splits)}.')
    return self.splits[split]

  def train_examples(self, process_index: int = 0, process_count: int = 1):
    """This process's contiguous share of the training examples."""
    examples = self.encoded('train')
    start, end = host_shards.shard_bounds(len(examples), process_index,
                                          process_count)
    return batching.EncodedPairs.from_pairs(
        examples[i] for i in range(start, end))

  def train_source_len(self, max_source_len: int) -> int:
    """The prompt width of training batches: train_prompt_len."""
    del max_source_len  # The loader chose train_prompt_len from it.
    return self.train_prompt_len

  def eval_ids(self, split: str, limit: int = 0
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """(prompt ids, reference ids) of the split's examples to decode.

    A prompt-less example gives its first eval_prompt_len tokens as the
    prompt (those with no token after them are skipped); the reference
    loses a final eos.

    Args:
      split: split name.
      limit: the first this many (0: all).
    """
    out = []
    examples = self.encoded(split)
    for i in range(len(examples)):
      pair = eval_pair(*examples[i], self.eval_prompt_len,
                       eos_id=self.vocab.eos_id)
      if pair is not None:
        out.append(pair)
        if len(out) == limit:
          break
    return out

  def pairs(self, split: str) -> list[tuple[str, str]]:
    """(prompt text, reference continuation text) of the eval examples."""
    return [(self.vocab.decode(p), self.vocab.decode(c))
            for p, c in self.eval_ids(split)]

  def sources(self, split: str, max_len: int,
              limit: int = 0) -> tuple[list[list[int]], int]:
    """Decoder inputs: bos + prompt, at most max_len tokens (a longer
    prompt keeps its end, the part next to the continuation); and how many
    were cut.

    Args:
      split: split name.
      max_len: the model's max_source_len (the input width).
      limit: the first this many examples (0: all).
    """
    if max_len < 2:
      raise ValueError(f'max_len={max_len} leaves no room for a prompt '
                       f'behind the start token.')
    inputs, cut = [], 0
    for prompt, _ in self.eval_ids(split, limit):
      prompt = [int(t) for t in prompt]
      if len(prompt) > max_len - 1:
        prompt, cut = prompt[len(prompt) - (max_len - 1):], cut + 1
      inputs.append([self.vocab.bos_id] + prompt)
    return inputs, cut


def eval_pair(prompt: collections.abc.Sequence[int],
              continuation: collections.abc.Sequence[int],
              eval_prompt_len: int, *, eos_id: int) -> tuple | None:
  """What evaluation decodes of one example: (prompt ids, reference ids).

  A prompt-less example gives its first eval_prompt_len tokens as the
  prompt, and None if no token follows them; the reference loses a final
  eos_id.
  """
  if not len(prompt):
    if len(continuation) <= eval_prompt_len:
      return None
    prompt, continuation = (continuation[:eval_prompt_len],
                            continuation[eval_prompt_len:])
  if len(continuation) and continuation[-1] == eos_id:
    continuation = continuation[:-1]
  return prompt, continuation


def has_eval_example(examples: collections.abc.Iterable[tuple],
                     eval_prompt_len: int, *, eos_id: int) -> bool:
  """Whether any of `examples` ((prompt ids, continuation ids)) gives
  evaluation something to decode (`eval_pair`).

  It stops at the first that does: a task loader checks a held-out split
  with it from a lazy iterable, before any training, without encoding the
  whole split.
  """
  return any(eval_pair(prompt, continuation, eval_prompt_len,
                       eos_id=eos_id) is not None
             for prompt, continuation in examples)


VOCAB_TYPES = ('sentencepiece', 'hf')
# The optional fields every LM task's section has (spec.TaskSpec.defaults):
# a SentencePiece vocabulary of its own text (`lm_vocab`).
DEFAULTS = dict(vocab_type='sentencepiece')
# Those of a task that can train on a distilled corpus too: not distilled.
DISTILLED_DEFAULTS = dict(DEFAULTS, distilled='')


def lm_vocab(config, workdir: str, train_vocab: bool,
             sentences: Callable[[], list[str]], **options):
  """An LM task's vocabulary, by task.vocab_type.

  'sentencepiece' (the default): found or trained on `sentences()`
  (`vocab.sentencepiece_vocab`, `options` its trainer options). 'hf': the
  tokenizer of the Hugging Face model folder task.vocab_path
  (tokenizer.json, text/hf_vocab.py), with that checkpoint's own ids: the
  vocabulary of a model imported from there (configs/hf_heads.py).
  """
  vocab_type = config.vocab_type
  if vocab_type not in VOCAB_TYPES:
    raise ValueError(f'task.vocab_type={vocab_type!r} is not one of '
                     f'{VOCAB_TYPES}.')
  if vocab_type == 'hf':
    if not config.get('vocab_path'):
      raise ValueError("task.vocab_type='hf' reads the tokenizer of a "
                       'Hugging Face model folder: set task.vocab_path to '
                       'it.')
    return hf_vocab.HFVocabulary(config.vocab_path)
  return vocab_lib.sentencepiece_vocab(config, workdir, train_vocab,
                                       sentences, **options)


def chunked(documents: collections.abc.Iterable[collections.abc.Sequence[int]],
            length: int, min_length: int = 2) -> batching.EncodedPairs:
  """Prompt-less examples: each document's ids cut into pieces of `length`
  tokens (the last piece of a document shorter; pieces under `min_length`
  dropped).

  Args:
    documents: token ids of each document, e.g. eos-ended.
    length: tokens a piece.
    min_length: the shortest piece kept.
  """
  if length < 1:
    raise ValueError(f'length={length} must be >= 1.')
  pieces = []
  for ids in documents:
    for start in range(0, len(ids), length):
      piece = ids[start:start + length]
      if len(piece) >= min_length:
        pieces.append(([], list(piece)))
  return batching.EncodedPairs.from_pairs(pieces)


# Tasks whose data has no held-out split of its own (a folder of text, a
# file of prompts) hold out one example in this many for evaluation.
HOLD_OUT_EVERY = 20


def hold_out(examples: batching.EncodedPairs
             ) -> dict[str, batching.EncodedPairs]:
  """{'train': examples, 'validation': held-out examples}: every
  HOLD_OUT_EVERY-th one, or the first where there are fewer (so that
  evaluation has one: a whole example, where the last is often a file's
  short end), in order."""
  count = len(examples)
  held = set(range(HOLD_OUT_EVERY - 1, count, HOLD_OUT_EVERY)) or (
      {0} if count else set())
  return {split: batching.EncodedPairs.from_pairs(
      examples[i] for i in range(count) if (i in held) == (split != 'train'))
          for split in ('train', 'validation')}


def check_decoder_only(task_name: str, num_encoder_layers: int) -> None:
  """Raises ValueError unless the model is decoder-only.

  Args:
    task_name: the config's task.name, for the message.
    num_encoder_layers: the model's encoder depth as the model factory
      resolves it (model.num_encoder_layers, else its size's).
  """
  if num_encoder_layers != 0:
    raise ValueError(
        f'task.name={task_name!r} trains a decoder-only model: set '
        f'model.num_encoder_layers=0 (it is {num_encoder_layers}).')


def check_model(config, train_prompt_len: int) -> None:
  """Raises ValueError unless the model section fits an LM task.

  A model (decoder-only: `check_decoder_only`) whose positions hold
  a training sequence (train_prompt_len + task.max_target_len) and a
  decode (start token, a prompt of task.max_source_len, eval.max_len
  tokens and the block's k - 1 positions past them); its input width
  model.max_source_len holds the start token and the prompt.

  Args:
    config: the whole config.
    train_prompt_len: the prompt width of training batches (0: none).
  """
  model, task = config.model, config.task
  if model.max_source_len < task.max_source_len + 1:
    raise ValueError(
        f'model.max_source_len={model.max_source_len} must hold the start '
        f'token and a prompt of task.max_source_len={task.max_source_len}: '
        f'>= {task.max_source_len + 1}.')
  training = train_prompt_len + task.max_target_len
  decoding = (1 + task.max_source_len + config.eval.max_len
              + max(config.eval.ks or (1,)) - 1)
  if model.max_target_len < max(training, decoding):
    raise ValueError(
        f'model.max_target_len={model.max_target_len} must hold a training '
        f'sequence ({training} positions) and a decode (start token, '
        f'{task.max_source_len}-token prompt, eval.max_len='
        f'{config.eval.max_len}, k - 1 more: {decoding}).')


def check_config(config, splits, *, train_prompts: bool,
                 continued: bool) -> None:
  """The config checks every LM task makes after its own section's.

  The model fits the task (`check_model`), eval.split is one of `splits`,
  and where evaluation continues text, its prompt leaves a continuation.

  Args:
    config: the whole config.
    splits: the task's split names.
    train_prompts: training examples hold a prompt of task.max_source_len
      tokens before their target (distilled continuations, a prompted
      dataset).
    continued: an evaluation example is text whose rest after a prompt of
      task.max_source_len tokens is the reference continuation, so the
      prompt must be shorter than an example (task.max_target_len).

  Raises:
    ValueError: one line naming the field (and the one it contradicts).
  """
  task = config.task
  check_model(config, train_prompt_len=(
      task.max_source_len if train_prompts else 0))
  eval_split(config, splits)
  if continued and task.max_source_len >= task.max_target_len:
    raise ValueError(
        f'task.max_source_len={task.max_source_len} (the evaluation prompt) '
        f'must be below task.max_target_len={task.max_target_len} (an '
        f'example): the rest of an example is the reference continuation.')


# A distilled LM corpus (bpd_jax.distill): the examples, and what they were
# made with.
DISTILLED_EXAMPLES, DISTILLED_INFO = 'train.npz', 'distilled.json'


def write_distilled(directory: str, examples: batching.EncodedPairs,
                    vocab: vocab_lib.Vocabulary, source: str = '') -> None:
  """Saves a distilled training split (prompt, the model's continuation)
  and the vocabulary its ids are of (fingerprint and size).

  Both files are written whole or not at all, and renamed into place
  together (`atomic_files`): a failed or killed write leaves the previous
  corpus, never a mix.

  Args:
    directory: the corpus's directory.
    examples: the (prompt ids, continuation ids) examples.
    vocab: the vocabulary of their ids.
    source: what made them (the run's workdir), for the record.

  Raises:
    errors.WriteError: a file could not be written.
  """
  info = dict(vocab_fingerprint=vocab.fingerprint, vocab_size=vocab.vocab_size,
              examples=len(examples), source=source)
  paths = [os.path.join(directory, name)
           for name in (DISTILLED_EXAMPLES, DISTILLED_INFO)]
  with atomic_files.replacing_all(paths) as (examples_path, info_path):
    examples.save(examples_path)
    with open(info_path, 'w', encoding='utf-8') as f:
      json.dump(info, f, indent=1)


def read_distilled(directory: str,
                   vocab: vocab_lib.Vocabulary) -> batching.EncodedPairs:
  """The distilled training split `write_distilled` saved in `directory`.

  Its ids must be of `vocab`: the same size is not enough (another corpus
  trains other pieces of the same number), so the fingerprints are
  compared; a corpus that records none cannot be checked and is refused.

  Raises:
    errors.MissingFileError: a file is missing.
    errors.DataError: its ids are of another vocabulary than the task's,
      or its record cannot be read.
  """
  paths = [os.path.join(directory, name)
           for name in (DISTILLED_EXAMPLES, DISTILLED_INFO)]
  for path in paths:
    if not os.path.isfile(path):
      raise errors.MissingFileError(
          f'{path} not found: python -m bpd_jax.distill --output_dir='
          f'{directory} writes a distilled language-model corpus.')
  try:
    with open(paths[1], encoding='utf-8') as f:
      info = json.load(f)
  except (OSError, ValueError) as error:
    raise errors.DataError(f'{paths[1]} cannot be read: {error}.') from None
  recorded = info.get('vocab_fingerprint') if isinstance(info, dict) else None
  if recorded is None:
    raise errors.DataError(
        f'{paths[1]} records no vocabulary fingerprint, so its ids cannot '
        f'be checked against the task\'s vocabulary: distil it again '
        f'(python -m bpd_jax.distill).')
  if recorded != vocab.fingerprint:
    raise errors.DataError(
        f'the corpus in {directory} has ids of another vocabulary: '
        f'fingerprint {recorded} ({info.get("vocab_size")} ids, distilled '
        f'from {info.get("source") or "an unnamed run"}) vs '
        f'{vocab.fingerprint} ({vocab.vocab_size} ids) of the task: give '
        f'the task the vocabulary of the run that distilled it '
        f'(task.vocab_path, or init_from=RUN in configs/lm_demo.py).')
  return batching.EncodedPairs.load(paths[0])
