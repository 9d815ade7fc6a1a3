"""The 'jsonl_prompts' task: prompts a model continues itself.

Where the text a model was trained on is not at hand, its heads learn
from the model's own continuations of prompts (self-distillation: Medusa-2
and EAGLE train so). task.path is a JSONL file, one JSON object a line
with the prompt as its "prompt" or "text" field (blank lines skipped).
Two jobs, one config (configs/hf_heads.py:data=FILE.jsonl):

1. The distill job continues every prompt greedily (eval.max_len tokens)
   with the model (an imported base: it needs no trained run) and writes
   the continuations to a directory (bpd_jax/distillation.py).
2. With task.distilled naming that directory, the examples are (prompt,
   continuation) pairs: one in `task_lib.HOLD_OUT_EVERY` (the first, where
   there are fewer) is held out for evaluation ('validation', whose
   references are then the model's own continuations), the rest train.

Without task.distilled the 'train' split is every prompt with no
continuation: what the distill job decodes, and nothing training can
learn (the training job says so); 'validation' holds out prompts as
above. A prompt longer than max_source_len keeps its end (the part the
continuation follows).

The task section's fields, besides name:
  path: the JSONL file.
  max_source_len: tokens of a prompt at most.
  max_target_len: tokens of a continuation at most (the distilled ones
    are eval.max_len long at most).
  vocab_type, vocab_path: 'hf' and the Hugging Face model folder (its
    tokenizer and ids), as configs/hf_heads.py sets them.
  distilled: '' (the default) or the directory `python -m bpd_jax.distill`
    wrote.
"""

import json
import os

from bpd_jax.tasks import batching
from bpd_jax.tasks import spec
from bpd_jax.tasks.lm import task as task_lib

SPLITS = ('train', 'validation')
FIELDS = ('prompt', 'text')  # A record's prompt: the first it has.


def read_prompts(path: str) -> list[str]:
  """The prompt of each record of the JSONL file, in order.

  Raises:
    FileNotFoundError: no such file.
    ValueError: a line that is not a JSON object with a string "prompt"
      or "text" (naming the file and the line), or no prompt at all.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f'task.path={path!r}: no such JSONL file.')
  prompts = []
  try:
    with open(path, encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          record = json.loads(line.rstrip('\r\n'))
        except json.JSONDecodeError as error:
          raise ValueError(f'{path}:{number} is not JSON ({error.msg}, '
                           f'column {error.colno}).') from None
        prompt = next((record[field] for field in FIELDS
                       if isinstance(record, dict) and field in record),
                      None)
        if not isinstance(prompt, str):
          raise ValueError(f'{path}:{number}: each line must be a JSON '
                           f'object with a string "prompt" (or "text").')
        prompts.append(prompt)
  except UnicodeDecodeError as error:
    raise ValueError(f'{path} is not UTF-8: byte '
                     f'{error.object[error.start]:#04x} at offset '
                     f'{error.start}.') from None
  if not any(p.strip() for p in prompts):
    raise ValueError(f'{path} holds no prompt.')
  return prompts


def _check(config) -> None:
  task = config.task
  if not isinstance(task.path, str) or not task.path:
    raise ValueError(f'task.path={task.path!r} must name the JSONL file of '
                     f'prompts.')
  task_lib.check_config(config, SPLITS, train_prompts=True, continued=False)
  if task.distilled and config.eval.max_len > task.max_target_len:
    raise ValueError(
        f'eval.max_len={config.eval.max_len} (the distilled continuations\' '
        f'length) exceeds task.max_target_len={task.max_target_len}: they '
        f'would be left out of training.')


def _load(config, workdir: str, train_vocab: bool = True) -> task_lib.LMTask:
  prompts = read_prompts(config.path)
  vocab = task_lib.lm_vocab(config, workdir, train_vocab,
                            lambda: list(prompts))
  if config.distilled:
    examples = task_lib.read_distilled(config.distilled, vocab)
  else:
    examples = batching.EncodedPairs.from_pairs(
        (ids[max(len(ids) - config.max_source_len, 0):], [])
        for ids in vocab.encode_many(prompts) if ids)
  splits = task_lib.hold_out(examples)
  if not config.distilled:
    splits['train'] = examples  # Every prompt: what the distill job reads.
  return task_lib.LMTask(vocab, splits, eval_prompt_len=config.max_source_len,
                         train_prompt_len=config.max_source_len)


SPEC = spec.TaskSpec(name='jsonl_prompts', kind='lm', load=_load,
                     check=_check, defaults=task_lib.DISTILLED_DEFAULTS)
