"""What a task module declares to the registry (bpd_jax/tasks/__init__.py)."""

import dataclasses
from typing import Any, Callable

KINDS = ('text', 'image', 'lm')


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """A task: its name, kind, config check and loader.

  Attributes:
    name: the config's task.name.
    kind: 'text' (sentence pairs, BLEU report), 'image' (super-resolution
      pairs, PSNR/SSIM report) or 'lm' (prompt -> continuation for a
      decoder-only model, perplexity report).
    load: (task section, workdir, train_vocab) -> the loaded task (a
      text.task.TextTask, images.task.ImageTask or lm.task.LMTask). It checks the task
      section itself first, so a loader called without the config check
      fails with the same messages.
    check: (whole config) -> None, raising ValueError naming the first bad
      field of what this task reads (task section, and the fields of other
      sections it constrains); runs before any work. The registry checks
      task.name and the max lengths of every task itself.
  """
  name: str
  kind: str
  load: Callable[..., Any]
  check: Callable[[Any], None] = lambda config: None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'task {self.name!r}: kind={self.kind!r} is not one '
                       f'of {KINDS}.')
