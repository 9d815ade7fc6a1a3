"""What a task is: the `Task` protocol every loaded task follows, and the
`TaskSpec` each task module declares to the registry (tasks/__init__.py).

Three classes follow `Task`: text.task.TextTask (sentence pairs),
images.task.ImageTask (super-resolution pairs, images as intensity
tokens) and lm.task.LMTask ((prompt, continuation) examples for a
decoder-only model). Text and language-model tasks also serve their text
(`TextualTask`): the bench, the draft job and distillation read it.
"""

import collections.abc
import dataclasses
from typing import Callable, Protocol, runtime_checkable

import ml_collections
import numpy as np

from bpd_jax.tasks.text import vocab as vocab_lib

KINDS = ('text', 'image', 'lm')

# Token ids of one side of an example: [length] ints (a list or an array).
Ids = collections.abc.Sequence[int] | np.ndarray
# (source ids, target ids): for a text task eos-ended sentences, for an
# image task the input's and the target's intensities (no eos), for a
# language-model task the prompt (maybe empty) and the continuation.
Example = tuple[Ids, Ids]


@runtime_checkable
class Vocab(Protocol):
  """What every task's vocabulary gives the jobs.

  Attributes:
    pad_id: the id the task pads rows with (-1: no vocabulary id pads).
    eos_id: the id its sequences end with.
    stop_ids: further ids that end a decode as eos_id does.
    bos_id: the id a decoder's input starts with.
  The model's config must have the same ids (a job checks it at start).
  """
  pad_id: int
  eos_id: int
  stop_ids: tuple[int, ...]
  bos_id: int

  @property
  def vocab_size(self) -> int:
    """Number of ids, the special ones included: the model config's
    vocab_size."""

  @property
  def fingerprint(self) -> str:
    """What the ids mean (recorded with a run, compared by every job that
    reads one)."""


@runtime_checkable
class Task(Protocol):
  """A loaded task: what training, evaluation and the jobs read of it."""

  @property
  def vocab(self) -> Vocab:
    """The ids' vocabulary."""

  @property
  def splits(self) -> collections.abc.Collection[str]:
    """The split names ('train', 'validation', ...); a split is read on
    first use, not to answer this."""

  def encoded(self, split: str) -> collections.abc.Sequence[Example]:
    """The split's examples as training reads them.

    Raises:
      ValueError: no such split.
    """

  def train_examples(self, process_index: int = 0, process_count: int = 1
                     ) -> collections.abc.Sequence[Example]:
    """The share of encoded('train') process `process_index` of
    `process_count` trains on (each process reads only its own)."""

  def train_source_len(self, max_source_len: int) -> int:
    """The source width of training batches, given the task section's
    max_source_len: that, or 0 where training examples have no source (a
    plain language model's empty prompts)."""

  def sources(self, split: str, max_len: int, limit: int = 0
              ) -> tuple[list[list[int]], int]:
    """The inputs a decoder is given for the split's first `limit`
    examples (0: all): [examples] lists of at most max_len ids (the
    model's max_source_len); and how many were cut to fit."""


@runtime_checkable
class TextualTask(Task, Protocol):
  """A task of text (kinds 'text' and 'lm'): its vocabulary encodes and
  decodes sentences, and it serves the text of its examples."""

  @property
  def vocab(self) -> vocab_lib.Vocabulary:
    """Encodes and decodes the text."""

  def pairs(self, split: str) -> list[tuple[str, str]]:
    """(source text, reference text) of the examples that `sources`
    decodes, in the same order: a translation pair, or an LM prompt and
    the continuation that follows it.

    Raises:
      ValueError: no such split.
    """


class Loader(Protocol):
  """A task module's loader (see `TaskSpec.load`)."""

  def __call__(self, config: ml_collections.ConfigDict, workdir: str,
               train_vocab: bool = True) -> Task:
    """The task a `task` section describes.

    Args:
      config: the `task` section.
      workdir: where a trained vocabulary and cached data are kept.
      train_vocab: train a missing vocabulary (the training job); False:
        a missing one is an error.
    """


def _no_check(config: ml_collections.ConfigDict) -> None:
  del config  # A task that constrains no field beyond its loader's.


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """A task: its name, kind, config check, loader and field defaults.

  Attributes:
    name: the config's task.name.
    kind: 'text' (sentence pairs, BLEU report), 'image' (super-resolution
      pairs, PSNR/SSIM report) or 'lm' (prompt -> continuation for a
      decoder-only model, perplexity report). The kind picks the task's
      report (evaluation/reports.py) and is what a job that serves only
      some kinds refuses (`tasks.require_kind`).
    load: loads the task: a text.task.TextTask, images.task.ImageTask or
      lm.task.LMTask. It checks the task section itself first, so a loader
      called without the config check fails with the same messages.
    check: (whole config) -> None, raising ValueError naming the first bad
      field of what this task reads (task section, and the fields of other
      sections it constrains); runs before any work. The registry checks
      task.name and the max lengths of every task itself.
    defaults: {field: value} of the optional fields of its task section,
      declared here once: the registry fills in those a section lacks
      (`fill_defaults`) before the check or the loader reads it, so they
      read plain attributes. A run recorded before a default was filled
      in compares as if it held it (infra/workdir.py ADDED_FIELDS).
  """
  name: str
  kind: str
  load: Loader
  check: Callable[[ml_collections.ConfigDict], None] = _no_check
  defaults: collections.abc.Mapping[str, object] = dataclasses.field(
      default_factory=dict)

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'task {self.name!r}: kind={self.kind!r} is not one '
                       f'of {KINDS}.')

  def fill_defaults(self, section: ml_collections.ConfigDict) -> None:
    """Adds to the task section each field of `defaults` it lacks (a
    locked section too: a job's --config is locked against typos)."""
    with section.unlocked():
      for field, value in self.defaults.items():
        if field not in section:
          section[field] = value
