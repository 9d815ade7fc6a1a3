"""Checks a training/eval config before any work starts.

Every problem is reported with the field's full name, its value and what it
must be, so a typo in a sweep fails in a second rather than after training.
"""

import os
import re

import numpy as np

from bpd_jax import decoding
from bpd_jax import tasks
from bpd_jax.evaluation import spec as evaluation_spec
from bpd_jax.infra import numeric
from bpd_jax.infra import schema
from bpd_jax.infra import sharding
from bpd_jax.models import factory
from bpd_jax.models import drafters
from bpd_jax.rescorers import ngram
from bpd_jax.training import losses
from bpd_jax.training import optim

SECTIONS = ('task', 'model', 'train', 'mesh', 'eval')
# The largest learning rate that is finite once optax casts it to float32.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_SHARE = schema.number(0, 1, open_high=True)  # A share in [0, 1).

# Each field's own limits (infra/schema.py; defaults and meanings:
# configs/base.py). Floats are finite: NaN and inf would pass a plain
# `x > 0` and train a model of NaNs.
TRAIN_FIELDS = {
    **{name: schema.integer(0) for name in ('base_steps', 'head_steps',
                                            'tokens_per_batch')},
    **{name: schema.integer(1) for name in (
        'batch_size', 'warmup_steps', 'grad_accum_steps', 'log_every',
        'checkpoint_every', 'keep_checkpoints')},
    'learning_rate': schema.number(0, _FLOAT32_MAX, open_low=True),
    'label_smoothing': _SHARE,
    'head1_weight': _SHARE,
    'base_learning_rate_scale': schema.number(0, 1, open_low=True),
    'input_dropout': _SHARE,
    'scheduled_sampling': schema.number(0, 1),
    'head_position_fraction': schema.number(0, 1, open_low=True),
    'head_loss_decay': schema.number(0, _FLOAT32_MAX),
    'clip_norm': schema.number(0),
    'head_targets': schema.choice(losses.HEAD_TARGETS),
    'draft_inputs': schema.choice(losses.DRAFT_INPUTS),
}
EVAL_FIELDS = {
    **{name: schema.integer(0) for name in (
        'num_examples', 'every', 'draft_vocab_size', 'perplexity_tokens')},
    **{name: schema.integer(1) for name in (
        'batch_size', 'max_len', 'periodic_examples', 'repeats')},
}


def check(config) -> None:
  """Raises ValueError naming the first bad field."""
  for section in SECTIONS:
    if section not in config:
      raise ValueError(f'the config has no {section!r} section.')
  # The vocabulary size comes from the task; any valid value (one that
  # holds an imported checkpoint's special ids) checks the rest.
  model_fields = config.model
  ids = [model_fields[name] for name in ('pad_id', 'eos_id', 'bos_id')
         if name in model_fields]
  ids += list(model_fields['stop_ids'] if 'stop_ids' in model_fields else ())
  largest = max((i for i in ids if numeric.is_integer(i)), default=0)
  model = factory.model_config_from(config,
                                    vocab_size=max(1024, largest + 1))
  tasks.check_model(config, model)  # What the task needs of the model.
  tasks.check(config)  # The task's own fields, and what it needs of others.
  _check_task_fits(config.task, model)
  _check_model_fits_the_host(model)
  train, ev = config.train, config.eval
  schema.check(TRAIN_FIELDS, train, 'train')
  schema.check(EVAL_FIELDS, ev, 'eval')
  _check_seed(config)
  _check_buckets(config)
  optim.schedule(train, train.base_steps)  # A known schedule name.
  _check_base_learning_rate_scale(train)
  _check_phases(train, model)
  _check_head_positions(train, model)
  _check_acceptance_weighted(train)
  _check_draft_inputs(train, model)
  _check_mixture(train, model)
  if model.mixture is not None and ev.draft_vocab_size:
    raise ValueError(f'eval.draft_vocab_size={ev.draft_vocab_size} with a '
                     f'mixture output (model.mixture_components='
                     f'{model.mixture.components}): its drafts have no '
                     f'vocabulary projection to cut; set it to 0.')
  criteria = ev.criteria
  if not criteria or isinstance(criteria, str):
    raise ValueError(f'eval.criteria={criteria!r} must be a non-empty tuple '
                     f'of criteria, e.g. (\'exact\', \'distance:4\').')
  _check_ks(ev)
  _check_decoders(ev, model)
  _check_samplers(config)
  _check_drafters(config)
  _check_trees(config)
  _check_mesh(config.mesh)
  _check_param_rules(config.mesh, ev)


def _check_seed(config) -> None:
  """seed: what both numpy's generators (>= 0) and JAX's keys (int64)
  take."""
  seed = config.seed
  if not numeric.is_integer(seed) or not 0 <= seed < 2**63:
    raise ValueError(f'seed={seed!r} must be an integer in [0, 2**63).')


def _check_phases(train, model) -> None:
  """train.base_steps and head_steps (each >= 0, TRAIN_FIELDS): a plan
  `training.phases.plan_phases` can run."""
  base, heads = train.base_steps, train.head_steps
  if train.init_heads and not train.init_from:
    raise ValueError('train.init_heads=True starts the heads from a trained '
                     'run: set train.init_from to its workdir.')
  if base + heads == 0:
    raise ValueError(f'train.base_steps={base} and train.head_steps={heads} '
                     f'must be >= 0 with a positive sum.')
  if not heads:
    return
  k = model.num_proposal_heads
  if k < 2:
    raise ValueError(f'train.head_steps={heads} needs proposal heads: '
                     f'model.num_proposal_heads={k} must be >= 2.')
  if not base and not train.init_from and train.freeze_base:
    raise ValueError('heads on a frozen base need a trained base: set '
                     'train.init_from to its workdir, or train.base_steps > '
                     '0, or train.freeze_base=False to train the base with '
                     'its heads from the start.')


def _check_mixture(train, model) -> None:
  """A mixture output's distribution is its own (models/mixture.py):
  label smoothing would spread mass onto ids it gives none (pad, eos)."""
  if model.mixture is not None and train.label_smoothing:
    raise ValueError(f'train.label_smoothing={train.label_smoothing} with '
                     f'a mixture output (model.mixture_components='
                     f'{model.mixture.components}): set it to 0.0.')


def _check_base_learning_rate_scale(train) -> None:
  scale = train.base_learning_rate_scale
  if scale != 1 and (train.freeze_base or not train.head_steps):
    raise ValueError(f'train.base_learning_rate_scale={scale} applies only '
                     f'when the heads phase fine-tunes the base: set '
                     f'train.freeze_base=False and train.head_steps > 0, '
                     f'or leave it at 1.0.')


def _check_ks(ev) -> None:
  """eval.ks: distinct block sizes >= 1. Greedy decoding (k = 1) is
  always reported (its row is every other's reference), so a 1 adds no
  row; a bool would be read as k = 0 or 1."""
  ks = tuple(ev.ks)
  if not all(numeric.is_integer(k) and k >= 1 for k in ks) or len(
      set(ks)) != len(ks):
    raise ValueError(f'eval.ks={ks!r} must be distinct integers >= 1 (block '
                     f'sizes of the blockwise rows; greedy decoding is always '
                     f'reported), e.g. (2, 4).')


def _check_mesh(mesh) -> None:
  """mesh.shape against mesh.axes and data_axis; whether the devices
  hold it is known only once the processes have joined (`jobs.setup`)."""
  shape = tuple(mesh.shape)
  if not all(numeric.is_integer(n) and (n >= 1 or n == -1) for n in shape
             ) or shape.count(-1) > 1:
    raise ValueError(f'mesh.shape={shape!r} must be integers >= 1, one of '
                     f'them -1 at most (all the remaining devices).')
  if len(shape) != len(mesh.axes):
    raise ValueError(f'mesh.shape={shape} and mesh.axes='
                     f'{tuple(mesh.axes)} differ in length.')
  if mesh.data_axis not in mesh.axes:
    raise ValueError(f'mesh.data_axis={mesh.data_axis!r} is not one '
                     f'of mesh.axes={tuple(mesh.axes)}.')


def _check_param_rules(mesh, ev) -> None:
  """mesh.param_rules: a shipped rule set whose axis the mesh has, or
  (regex, spec) pairs naming its axes; and, with split parameters, an
  eval batch that the data axis divides (split parameters cannot be
  gathered onto one device to decode a batch of one there). What the
  parameters' shapes allow is checked when they exist (`train.train`)."""
  rules, axes = mesh.param_rules, tuple(mesh.axes)
  if not rules:
    return
  if isinstance(rules, str):
    if rules not in sharding.RULE_SETS:
      raise ValueError(f'mesh.param_rules={rules!r} is not one of '
                       f'{sharding.RULE_SETS}, nor (regex, spec) pairs.')
    needed = sharding.RULE_SET_AXES[rules]
    if needed not in axes:
      raise ValueError(f'mesh.param_rules={rules!r} splits over a '
                       f'{needed!r} mesh axis; mesh.axes={axes} (e.g. '
                       f"mesh.shape=(2, 4), mesh.axes=('data', 'model')).")
  else:
    for pair in rules:
      if (not isinstance(pair, (tuple, list)) or len(pair) != 2
          or not isinstance(pair[0], str)
          or not isinstance(pair[1], (tuple, list))):
        raise ValueError(f'mesh.param_rules entry {pair!r} is not a (regex, '
                         f'spec) pair, e.g. (\'.*/ffn/up/kernel\', (None, '
                         f'\'model\')).')
      try:
        re.compile(pair[0])
      except re.error as error:
        raise ValueError(f'mesh.param_rules regex {pair[0]!r}: {error}.'
                         ) from error
      unknown = [a for a in pair[1] if a not in (None, ...) and a not in axes]
      if unknown:
        raise ValueError(f'mesh.param_rules entry {tuple(pair)!r} names '
                         f'{unknown[0]!r}, not one of mesh.axes={axes}.')
  data_devices = dict(zip(axes, mesh.shape))[mesh.data_axis]
  if data_devices != -1:  # Else known when the devices are (`placement`).
    sharding.check_eval_batch(ev.batch_size, data_devices, rules)


def _check_decoders(ev, model) -> None:
  """Every decoder of the eval table, checked as a decode checks it."""
  # The vocabulary comes with the task's data and is checked when decoding;
  # here every other limit of each decoder's options.
  unknown_vocabulary = 2**31
  for spec in ev.criteria:
    for k in (1, *ev.ks):  # Greedy decoding, then the blockwise rows.
      try:
        decoding.DecodeOptions.from_specs(
            max_len=ev.max_len, k=k, criterion=spec,
            min_block=ev.min_block if k > 1 else 1).check(
                model.num_proposal_heads, unknown_vocabulary,
                drafters.dependent(model.head_layer))
      except ValueError as error:
        raise ValueError(f'eval (ks={tuple(ev.ks)}, min_block='
                         f'{ev.min_block}, criteria={tuple(ev.criteria)}): '
                         f'{error}') from error
  largest = decoding.DecodeOptions(max_len=ev.max_len, k=max(ev.ks, default=1))
  needed = largest.required_positions(1)
  if needed > model.max_target_len:
    raise ValueError(f'eval.max_len={ev.max_len} with k up to '
                     f'{largest.k} needs {needed} decoder positions; '
                     f'model.max_target_len={model.max_target_len}.')


def _check_head_positions(train, model) -> None:
  """train.head_position_fraction (in (0, 1], TRAIN_FIELDS): sampled only
  where it can."""
  fraction = train.head_position_fraction
  if fraction < 1 and train.random_head:
    raise ValueError(f'train.head_position_fraction={fraction} with '
                     f'train.random_head=True: each cuts the heads\' cost '
                     f'of a step; choose one.')
  if fraction < 1 and not drafters.get(model.head_layer).samples_positions:
    raise ValueError(f'train.head_position_fraction={fraction}: the '
                     f'{model.head_layer!r} drafter attends over every '
                     f'position, so its positions cannot be sampled; set '
                     f'it to 1.0.')


def _check_acceptance_weighted(train) -> None:
  """train.acceptance_weighted: a head's weight is read from the heads
  before it, which a step that trains one random head lacks."""
  if train.acceptance_weighted and train.random_head:
    raise ValueError('train.acceptance_weighted=True with '
                     'train.random_head=True: a head\'s weight is the '
                     'probability that the heads before it were right, and '
                     'a random-head step trains one head; choose one.')


def _check_draft_inputs(train, model) -> None:
  """train.draft_inputs (one of losses.DRAFT_INPUTS, TRAIN_FIELDS): where
  it acts."""
  inputs = train.draft_inputs
  if inputs != 'data' and not drafters.dependent(model.head_layer):
    raise ValueError(f'train.draft_inputs={inputs!r}: '
                     f'head_layer={model.head_layer!r} heads read no '
                     f'earlier drafts; set it to \'data\'.')


def _check_task_fits(task, model) -> None:
  if not task.max_source_len <= model.max_source_len:
    raise ValueError(f'task.max_source_len={task.max_source_len} exceeds '
                     f'model.max_source_len={model.max_source_len}.')
  if not task.max_target_len <= model.max_target_len:
    raise ValueError(f'task.max_target_len={task.max_target_len} exceeds '
                     f'model.max_target_len={model.max_target_len}.')


def host_memory_bytes() -> int:
  """This host's physical memory: where every job builds, imports or reads
  its model whole before placing it (`factory.build_place`)."""
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def _check_model_fits_the_host(model) -> None:
  """Refuses a model whose feed-forward weights alone outgrow this host's
  memory: a mistyped d_model, d_ff or depth (a zero too many) otherwise
  allocates until the operating system stops the job. A floor, not an
  estimate: every layer holds at least two d_model x d_ff matrices, at
  least 2 bytes a parameter."""
  layers = model.num_encoder_layers + model.num_decoder_layers
  floor = 2 * layers * model.d_model * model.d_ff * 2  # Bytes.
  memory = host_memory_bytes()
  if floor > memory:
    raise ValueError(
        f'model.d_model={model.d_model}, d_ff={model.d_ff} and {layers} '
        f'layers (num_encoder_layers + num_decoder_layers) hold at least '
        f'{floor / 2 / 1e9:.3g} billion parameters, {floor / 2**30:.3g} GiB '
        f'even in bfloat16: more than this host\'s {memory / 2**30:.3g} GiB '
        f'of memory; check those fields.')


def _check_buckets(config) -> None:
  """Token-count batching: train.tokens_per_batch and bucket_lengths."""
  train, task = config.train, config.task
  if not train.tokens_per_batch:  # >= 0: TRAIN_FIELDS.
    return
  lengths = list(train.bucket_lengths)
  if not all(numeric.is_integer(n) and n >= 2 for n in lengths) or (
      not lengths or lengths != sorted(set(lengths))):
    raise ValueError(f'train.bucket_lengths={tuple(lengths)} must be '
                     f'integers >= 2, strictly ascending.')
  longest = max(task.max_source_len, task.max_target_len)
  if lengths[-1] < longest:
    raise ValueError(f'train.bucket_lengths ends at {lengths[-1]}, below the '
                     f'task\'s longest pair ({longest} tokens): those pairs '
                     f'would be dropped; add a bucket of {longest}.')


def _check_drafters(config) -> None:
  """eval.drafters: each a valid spec, checked at every k; 'ngram' ones
  need eval.ngram_path, a file NgramModel.save wrote; none on image
  tasks."""
  ev = config.eval
  _reported_for_text(config, 'drafters', 'drafters needing no training are')
  for drafter in ev.drafters:
    if drafter in ('', 'heads'):  # The heads' rows are there already.
      raise ValueError(f'eval.drafters={tuple(ev.drafters)}: {drafter!r} is '
                       f"the model's heads, whose rows eval.ks gives; a "
                       f"drafter here is 'lookup' or 'ngram', with options.")
    _check_decodes(config, f'eval.drafters ({drafter!r} at ks='
                   f'{tuple(ev.ks)})', ev.ks, drafter=drafter)
  wants_ngram = any(d.startswith('ngram') for d in ev.drafters)
  if wants_ngram and not ev.ngram_path:
    raise ValueError(f"eval.drafters={tuple(ev.drafters)}: an 'ngram' "
                     f'drafter reads eval.ngram_path, an n-gram model (the '
                     f"drafts job's OUTPUT_DIR/ngram.npz); it is empty.")
  if ev.ngram_path and not os.path.isfile(ev.ngram_path):
    raise ValueError(f'eval.ngram_path={ev.ngram_path!r} is not a file.')
  if ev.ngram_path:  # Its arrays, on the host: before any work.
    ngram.read_arrays(ev.ngram_path)


def _check_trees(config) -> None:
  """eval.trees: each a valid tree spec at every k it decodes at, text and
  language-model tasks."""
  ev = config.eval
  _reported_for_text(config, 'trees', 'trees are')
  for tree in ev.trees:
    if not isinstance(tree, str):
      raise ValueError(f'eval.trees ({tree!r}): a tree is a spec string, '
                       f"widths like '2,2' or 'dynamic:N'.")
    try:
      ks = evaluation_spec.tree_ks(tree, ev.ks)
    except ValueError as error:
      raise ValueError(f'eval.trees ({tree!r}): {error}') from error
    if not ks:
      raise ValueError(f'eval.trees ({tree!r}): no k of eval.ks='
                       f'{tuple(ev.ks)} is deep enough for it.')
    _check_decodes(config, f'eval.trees ({tree!r} at ks={tuple(ks)})', ks,
                   tree=tree)


def _reported_for_text(config, field: str, subject: str) -> None:
  """Raises ValueError where eval.`field` is set on a task that is neither
  text nor a language model (`subject`: what is reported, with its
  verb)."""
  values = config.eval[field]
  if values and tasks.get(config.task.name).kind not in ('text', 'lm'):
    raise ValueError(f'eval.{field}={tuple(values)}: {subject} reported '
                     f'for text and language-model tasks; task.name='
                     f'{config.task.name!r} is neither.')


def _check_decodes(config, name: str, ks, **specs) -> None:
  """Raises ValueError starting with `name` where the decode of `specs`
  (`DecodeOptions.from_specs`) at any of `ks` is one the model cannot
  make."""
  model = config.model
  for k in ks:
    try:
      decoding.DecodeOptions.from_specs(
          max_len=config.eval.max_len, k=k, **specs).check(
              model.num_proposal_heads, 2**31,
              drafters.dependent(model.head_layer))
    except ValueError as error:
      raise ValueError(f'{name}: {error}') from error


def _check_samplers(config) -> None:
  """eval.samplers: each a valid sampler, text and language-model tasks
  only."""
  samplers = config.eval.samplers
  _reported_for_text(config, 'samplers', 'sampling is')
  for spec in samplers:
    try:
      decoding.Sampler.from_spec(spec).check(vocab_size=2**31)
    except ValueError as error:
      raise ValueError(f'eval.samplers: {error}') from error
