"""Checks a training/eval config before any work starts.

Every problem is reported with the field's full name, its value and what it
must be, so a typo in a sweep fails in a second rather than after training.
"""

from bpd_jax import decoding
from bpd_jax.data import embedded_images
from bpd_jax.data import tasks
from bpd_jax.models import factory

SECTIONS = ('task', 'model', 'train', 'mesh', 'eval')


def check(config) -> None:
  """Raises ValueError naming the first bad field."""
  for section in SECTIONS:
    if section not in config:
      raise ValueError(f'the config has no {section!r} section.')
  # The vocabulary size comes from the task; any valid value checks the rest.
  model = factory.model_config_from(config, vocab_size=1024)
  _check_task(config.task, model)
  train, ev = config.train, config.eval
  _at_least(train, 'train', batch_size=1, base_steps=0, head_steps=0,
            warmup_steps=1, grad_accum_steps=1, log_every=1,
            checkpoint_every=1, keep_checkpoints=1)
  _at_least(ev, 'eval', batch_size=1, max_len=1, num_examples=0, every=0,
            periodic_examples=1)
  _check_buckets(config)
  if not train.learning_rate > 0:
    raise ValueError(f'train.learning_rate={train.learning_rate} must be > 0.')
  if not 0 <= train.label_smoothing < 1:
    raise ValueError(f'train.label_smoothing={train.label_smoothing} must be '
                     f'in [0, 1).')
  if not 0 <= train.head1_weight < 1:
    raise ValueError(f'train.head1_weight={train.head1_weight} must be in '
                     f'[0, 1).')
  if not 0 <= train.get('input_dropout', 0.0) < 1:
    raise ValueError(f'train.input_dropout={train.input_dropout} must be in '
                     f'[0, 1).')
  if train.clip_norm < 0:
    raise ValueError(f'train.clip_norm={train.clip_norm} must be >= 0.')
  decoding.from_spec(ev.criterion)
  if config.task.name in tasks.IMAGE_TASKS:
    _check_image_eval(config)
  heads = model.num_proposal_heads
  for k in ev.ks:
    if not isinstance(k, int) or not 1 <= k <= heads:
      raise ValueError(f'eval.ks: k={k!r} must be an integer in [1, {heads}] '
                       f'(model.num_proposal_heads).')
  if ev.ks and not 1 <= ev.min_block <= min(ev.ks):
    raise ValueError(f'eval.min_block={ev.min_block} must be in '
                     f'[1, {min(ev.ks)}] (the smallest k).')
  needed = ev.max_len + max(ev.ks or [1])
  if needed > model.max_target_len:
    raise ValueError(f'eval.max_len={ev.max_len} with k up to '
                     f'{max(ev.ks or [1])} needs {needed} decoder positions; '
                     f'model.max_target_len={model.max_target_len}.')
  if len(config.mesh.shape) != len(config.mesh.axes):
    raise ValueError(f'mesh.shape={tuple(config.mesh.shape)} and mesh.axes='
                     f'{tuple(config.mesh.axes)} differ in length.')
  if config.mesh.data_axis not in config.mesh.axes:
    raise ValueError(f'mesh.data_axis={config.mesh.data_axis!r} is not one '
                     f'of mesh.axes={tuple(config.mesh.axes)}.')


def _check_task(task, model) -> None:
  if task.name not in tasks.TASKS:
    raise ValueError(f'task.name={task.name!r} is not one of {tasks.TASKS}.')
  _at_least(task, 'task', max_source_len=2, max_target_len=2)
  if not task.max_source_len <= model.max_source_len:
    raise ValueError(f'task.max_source_len={task.max_source_len} exceeds '
                     f'model.max_source_len={model.max_source_len}.')
  if not task.max_target_len <= model.max_target_len:
    raise ValueError(f'task.max_target_len={task.max_target_len} exceeds '
                     f'model.max_target_len={model.max_target_len}.')
  if task.name == 'parallel_text':
    if task.vocab_type not in tasks.VOCAB_TYPES:
      raise ValueError(f'task.vocab_type={task.vocab_type!r} is not one of '
                       f'{tasks.VOCAB_TYPES}.')
  if task.name in ('parallel_text', 'tfds_translation'):
    if 'train' not in task.splits:
      raise ValueError(f'task.splits={dict(task.splits)} needs "train".')
  if task.name == 'tfds_translation':
    if not isinstance(task.dataset, str) or task.dataset.count('/') != 1:
      raise ValueError(f'task.dataset={task.dataset!r} must be a TFDS '
                       f'"name/config", e.g. "wmt14_translate/de-en".')
    _at_least(task, 'task', vocab_size=8, vocab_sample=0)
  if task.name in tasks.IMAGE_TASKS:
    _check_image_task(task)


def _check_image_task(task) -> None:
  """Super-resolution: image sizes, token lengths, splits."""
  _at_least(task, 'task', high_res=1, low_res=1)
  if task.high_res % task.low_res:
    raise ValueError(f'task.high_res={task.high_res} must be a multiple of '
                     f'task.low_res={task.low_res} (inputs are area means of '
                     f'whole blocks of the target).')
  for field, side in (('max_source_len', task.low_res),
                      ('max_target_len', task.high_res)):
    if task[field] != side * side * 3:
      raise ValueError(f'task.{field}={task[field]} must be {side * side * 3}'
                       f' ({side}x{side}x3 intensities, no eos).')
  if task.name == 'embedded_images':
    sizes = dict(task.sizes)
    if 'train' not in sizes or not set(sizes) <= set(embedded_images.SPLITS):
      raise ValueError(f'task.sizes={sizes} must have a "train" entry and '
                       f'only splits of {embedded_images.SPLITS}.')
    for split, count in sizes.items():
      if not isinstance(count, int) or count < 1:
        raise ValueError(f'task.sizes[{split!r}]={count!r} must be an '
                         f'integer >= 1.')
    scales = tuple(task.get('scales', embedded_images.DEFAULT_SCALES))
    if not scales or not all(isinstance(s, int) and s >= 1 for s in scales):
      raise ValueError(f'task.scales={scales} must be integers >= 1.')
  else:
    if 'train' not in task.splits:
      raise ValueError(f'task.splits={dict(task.splits)} needs "train".')
    if not isinstance(task.dataset, str) or not task.dataset:
      raise ValueError(f'task.dataset={task.dataset!r} must be a TFDS name, '
                       f'e.g. "celeb_a".')
    _at_least(task, 'task', mock_examples=0)


def _check_image_eval(config) -> None:
  """The super-resolution report's fields (bpd_jax/sr_eval.py)."""
  ev, task = config.eval, config.task
  _at_least(ev, 'eval', grid_examples=1)
  pixels = task.high_res * task.high_res * 3
  if ev.max_len != pixels:
    raise ValueError(f'eval.max_len={ev.max_len} must be {pixels}: a '
                     f'{task.high_res}x{task.high_res}x3 image\'s '
                     f'intensities.')
  criteria = ev.get('criteria')
  if not criteria or isinstance(criteria, str):
    raise ValueError(f'eval.criteria={criteria!r} must be a non-empty tuple '
                     f'of criteria, e.g. (\'exact\', \'distance:4\').')
  for spec in criteria:
    decoding.from_spec(spec)


def _check_buckets(config) -> None:
  """Token-count batching: train.tokens_per_batch and bucket_lengths."""
  train, task = config.train, config.task
  tokens = train.get('tokens_per_batch', 0)
  if task.name == 'tfds_translation' and not tokens:
    raise ValueError('task.name=\'tfds_translation\' reads a shard per '
                     'process and needs token-count batches: set '
                     'train.tokens_per_batch > 0.')
  if not tokens:
    return
  _at_least(train, 'train', tokens_per_batch=1)
  lengths = list(train.bucket_lengths)
  if not lengths or lengths != sorted(set(lengths)) or not all(
      isinstance(n, int) and n >= 2 for n in lengths):
    raise ValueError(f'train.bucket_lengths={tuple(lengths)} must be '
                     f'integers >= 2, strictly ascending.')
  longest = max(task.max_source_len, task.max_target_len)
  if lengths[-1] < longest:
    raise ValueError(f'train.bucket_lengths ends at {lengths[-1]}, below the '
                     f'task\'s longest pair ({longest} tokens): those pairs '
                     f'would be dropped; add a bucket of {longest}.')


def _at_least(section, name, **minimums) -> None:
  for field, minimum in minimums.items():
    if field not in section:
      raise ValueError(f'{name}.{field} is missing: an integer >= {minimum}.')
    value = section[field]
    if not isinstance(value, int) or value < minimum:
      raise ValueError(f'{name}.{field}={value!r} must be an integer >= '
                       f'{minimum}.')
