"""Kim et al.'s language tasks through TFDS, as prompt -> continuation.

Kim et al. 2024 measure blockwise drafts on decoder-only models for
language modelling (LM1B), summarisation (CNN/DailyMail, XSum) and
question answering (SQuAD). Each dataset's examples become (prompt,
continuation) text by its FORMATS entry: language modelling has no prompt
(its text is the continuation, cut into examples of max_target_len
tokens, and evaluation prompts with its first max_source_len tokens);
summarisation prompts with the document and the cue "Summary:", question
answering with the context, the question and "Answer:" (GPT-2's zero-shot
formats), and the continuation is the summary or the first answer, ended
with eos. A prompt longer than max_source_len keeps its end (the cue), a
continuation longer than max_target_len its start.

Read with `tfds.data_source` (no TensorFlow; tasks/tfds_builders.py), a
SentencePiece vocabulary trained on a seeded sample of the training
examples (saved in the workdir, reused on resume). Splits are encoded on
first use, but each is checked when the task is loaded: it has examples,
training text, and a held-out split something to evaluate; a split that
fails stops the job before the first training step.

The 'tfds_lm' task's section, besides name:
  dataset: a TFDS name whose base is a FORMATS key, e.g. 'lm1b',
    'cnn_dailymail', 'xsum', 'squad/v1.1', 'c4/en'.
  data_dir: where `tfds build` prepared it.
  splits: {our split: TFDS split}, must include 'train'.
  max_source_len: tokens of a prompt at most (an LM's evaluation prompt).
  max_target_len: tokens of a continuation at most (an LM's example).
  train_limit: read the first N training examples (0: all).
  vocab_size, vocab_sample, vocab_path: the SentencePiece vocabulary,
    trained on vocab_sample training examples (0: all), or an existing one
    (vocab_type 'sentencepiece', the default); vocab_type 'hf': the
    tokenizer of the Hugging Face model folder vocab_path, with its ids
    (tasks/lm/task.py `lm_vocab`).
  mock_examples: 0, or N: TFDS mock data of N random examples a split.
"""

import dataclasses
import string

import numpy as np

from bpd_jax.tasks import batching
from bpd_jax.tasks import spec
from bpd_jax.tasks import tfds_builders
from bpd_jax.tasks.checks import at_least, needs_train_split
from bpd_jax.tasks.lm import task as task_lib
from bpd_jax.tasks.text import task as text_task


@dataclasses.dataclass(frozen=True)
class Format:
  """How a dataset's example becomes (prompt, continuation) text.

  Attributes:
    prompt: a str.format template over the example's features; None for
      language modelling (no prompt).
    continuation: the same for the continuation.
  """
  prompt: str | None
  continuation: str


FORMATS = {
    'lm1b': Format(None, '{text}'),
    'c4': Format(None, '{text}'),
    'cnn_dailymail': Format('{article}\nSummary:', ' {highlights}'),
    'xsum': Format('{document}\nSummary:', ' {summary}'),
    'squad': Format('{context}\nQuestion: {question}\nAnswer:',
                    ' {answers}'),
}


def _text(value) -> str:
  """A feature as text: bytes decoded; a nested answer's first text."""
  if isinstance(value, dict):  # SQuAD's answers: {'text': [...], ...}.
    texts = value.get('text', ())
    value = texts[0] if len(texts) else ''
  if isinstance(value, np.ndarray) and value.shape == ():
    value = value.item()
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def format_of(dataset: str) -> Format:
  """The Format of a TFDS name ('squad/v1.1' -> FORMATS['squad'])."""
  base = dataset.split('/')[0].split(':')[0]
  if base not in FORMATS:
    raise ValueError(f'task.dataset={dataset!r}: no prompt -> continuation '
                     f'format for {base!r}; known: {sorted(FORMATS)}.')
  return FORMATS[base]


class ExampleSource:
  """Random access to one split's (prompt, continuation) texts."""

  def __init__(self, builder, split: str, form: Format):
    self.split, self.form = split, form
    self.name = f'split {split!r} of {builder.info.full_name}'  # Messages.
    self._data = builder.as_data_source(split=split)
    if not len(self._data):  # Stop before any work, not at evaluation.
      raise ValueError(f'{self.name} has no examples.')
    features = set(self._data[0])
    for template in (form.prompt or '', form.continuation):
      for name in _fields(template):
        if name not in features:
          raise ValueError(f'{builder.info.full_name} examples have no '
                           f'{name!r}; features: {sorted(features)}.')

  def __len__(self) -> int:
    return len(self._data)

  def __getitem__(self, index: int) -> tuple[str, str]:
    example = {name: _text(value)
               for name, value in self._data[int(index)].items()}
    prompt = (self.form.prompt.format(**example).strip()
              if self.form.prompt else '')
    return prompt, self.form.continuation.format(**example).rstrip()

  def texts(self, limit: int = 0) -> list[tuple[str, str]]:
    return [self[i] for i in range(min(limit or len(self), len(self)))]


def _fields(template: str) -> list[str]:
  return [name for _, name, _, _ in string.Formatter().parse(template)
          if name]


def encode(texts: list[tuple[str, str]], vocab, prompted: bool,
           max_source_len: int,
           max_target_len: int) -> batching.EncodedPairs:
  """(prompt ids, continuation ids) examples of (prompt, continuation) text.

  Prompted: a prompt keeps its last max_source_len tokens, a continuation
  (eos-ended) its first max_target_len. Not prompted: each eos-ended text
  cut into examples of max_target_len tokens.
  """
  prompts = vocab.encode_many([p for p, _ in texts]) if prompted else None
  continuations = [ids + [vocab.eos_id] for ids in
                   vocab.encode_many([c for _, c in texts])]
  if not prompted:
    return task_lib.chunked(continuations, max_target_len)
  return batching.EncodedPairs.from_pairs(
      (p[max(len(p) - max_source_len, 0):], c[:max_target_len])
      for p, c in zip(prompts, continuations))


def _check_section(task) -> None:
  needs_train_split(task, 'the vocabulary and training examples come from '
                    'it')
  if not isinstance(task.dataset, str) or not task.dataset:
    raise ValueError(f'task.dataset={task.dataset!r} must be a TFDS name, '
                     f'e.g. "cnn_dailymail".')
  format_of(task.dataset)
  at_least(task, 'task', vocab_size=8, vocab_sample=0, train_limit=0,
           mock_examples=0)


def _check(config) -> None:
  task = config.task
  _check_section(task)
  prompted = format_of(task.dataset).prompt is not None
  # A prompted dataset's references are its own targets, not the rest of
  # a text.
  task_lib.check_config(config, task.splits, train_prompts=prompted,
                        continued=not prompted)


def check_training_text(source: ExampleSource, prompted: bool,
                        limit: int) -> None:
  """Raises ValueError unless training has text to learn (the first
  `limit` examples, 0: all), before the vocabulary is trained on it.

  A prompted example always has its prompt's cue; a language-modelling
  text is read until one is not empty.
  """
  count = min(limit or len(source), len(source))
  if not prompted and not any(source[i][1] for i in range(count)):
    raise ValueError(f'{source.name} (task.splits.train) has nothing to '
                     f'train on: the text of its {count} example(s) is '
                     f'empty.')


def check_evaluation(name: str, source: ExampleSource, vocab,
                     prompted: bool, max_source_len: int,
                     max_target_len: int) -> None:
  """Raises ValueError unless a held-out example gives evaluation a prompt
  and a token after it (`task_lib.eval_pair`).

  Examples are encoded one at a time until one does (the first, as a
  rule): the split is still read in full only when a job uses it.
  """
  examples = (example for i in range(len(source)) for example in encode(
      [source[i]], vocab, prompted, max_source_len, max_target_len))
  if not task_lib.has_eval_example(examples, max_source_len,
                                   eos_id=vocab.eos_id):
    raise ValueError(
        f'{source.name} (task.splits.{name}) has nothing to evaluate: none '
        f'of its {len(source)} example(s) is longer than '
        f'task.max_source_len={max_source_len} tokens with its eos (the '
        f'evaluation prompt): evaluation needs a token after the prompt.')


def _load(config, workdir: str, train_vocab: bool = True) -> task_lib.LMTask:
  """Splits opened (read on first use); the vocabulary found or trained."""
  _check_section(config)
  form = format_of(config.dataset)
  prompted = form.prompt is not None
  with tfds_builders.opened(config.dataset, config.data_dir,
                            config.splits.values(),
                            config.mock_examples) as builder:
    sources = {name: ExampleSource(builder, split, form)
               for name, split in config.splits.items()}
  check_training_text(sources['train'], prompted, config.train_limit)

  def vocab_text():
    rng = np.random.default_rng(0)
    train = sources['train']
    count = min(config.vocab_sample or len(train), len(train))
    indices = np.sort(rng.choice(len(train), count, replace=False))
    return [text for i in indices for text in train[i] if text]

  vocab = task_lib.lm_vocab(config, workdir, train_vocab, vocab_text)

  def reader(name):
    limit = config.train_limit if name == 'train' else 0
    return lambda: encode(sources[name].texts(limit), vocab, prompted,
                          config.max_source_len, config.max_target_len)

  for name, source in sources.items():
    if name != 'train':  # Checked before the first training step.
      check_evaluation(name, source, vocab, prompted, config.max_source_len,
                       config.max_target_len)
  splits = text_task.LazySplits({name: reader(name) for name in sources})
  return task_lib.LMTask(
      vocab, splits, eval_prompt_len=config.max_source_len,
      train_prompt_len=config.max_source_len if prompted else 0)


SPEC = spec.TaskSpec(name='tfds_lm', kind='lm', load=_load, check=_check,
                     defaults=task_lib.DEFAULTS)
