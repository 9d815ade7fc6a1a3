"""Config -> model: the architecture of a config, random or restored.

The training job builds its model from `model_config_from`, its base from
another run or an imported checkpoint where train.init_from names one
(`warm_start`); the evaluation, bench, draft and distillation jobs
(through `bpd_jax/jobs.py`) take the latest checkpoint of a run
(`restore_model`), the imported base of a run that has none yet
(`warm_started_model`), or the config's seeded random weights
(`random_model`). The vocabulary size comes from the task, which
the caller loads: nothing here reads data.

A run that trains heads on a frozen imported model (`frozen_imported_base`)
saves the heads alone: its checkpoints record the model's folder and a
fingerprint of its weights (`base_record`), and every restore rebuilds the
base from that folder and refuses other weights (`with_recorded_base`).

A model whose parameters a config splits over a mesh (mesh.param_rules)
may not fit one accelerator: the jobs build or read it in the host's
memory (`build_place`), then split it over the mesh.
"""

import contextlib
import dataclasses
import os

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.models import imports
from bpd_jax.models.mixture import OutputMixture
from bpd_jax.models.positions import ImagePositions
from bpd_jax.models.rotary import RopeScaling
from bpd_jax.models.transformer import Transformer, TransformerConfig


def host_device() -> jax.Device:
  """The host's memory, as a device: the CPU backend's first local one
  (on a machine without accelerators, the default device itself)."""
  return jax.local_devices(backend='cpu')[0]


def build_place(config):
  """A context in which a job builds, imports or reads its model: the
  host's memory when mesh.param_rules split the parameters (a model too
  large for one accelerator is never whole on one; the caller then lays
  it out over the mesh), else JAX's default device."""
  if config.mesh.param_rules:
    return jax.default_device(host_device())
  return contextlib.nullcontext()


def model_config_from(config, vocab_size: int) -> TransformerConfig:
  """The TransformerConfig of a config's `model` section (validated).

  The section is flat but for `rope_scaling` (None or a dict of
  RopeScaling's fields); the image fields become one ImagePositions, the
  mixture fields one OutputMixture.
  """
  fields = dict(config.model)
  image = ImagePositions.pop_from(fields)  # The flat model.*image* fields.
  fields['mixture'] = OutputMixture.pop_from(fields)  # model.mixture_*.
  if 'rope_scaling' in fields:
    fields['rope_scaling'] = RopeScaling.from_fields(fields['rope_scaling'])
  return TransformerConfig.from_size(**fields, image=image,
                                     vocab_size=vocab_size)


# The ids a model and its task's vocabulary must share: what pads, ends and
# starts a sequence.
SPECIAL_IDS = ('pad_id', 'eos_id', 'bos_id', 'stop_ids')


def check_special_ids(model_config: TransformerConfig, vocab) -> None:
  """Raises errors.ConfigError unless the model's special ids are the task
  vocabulary's (`vocab`: pad_id, eos_id, bos_id, stop_ids), which padded,
  ended and started the data it reads.

  Every job checks it at start: a model whose eos is not the data's would
  learn and decode with another end, one whose pad is a token of the data
  would read padding as text. So is a mixture output's first value id
  (the vocabulary's intensity_offset: a task of ordered values).
  """
  model = {name: getattr(model_config, name) for name in SPECIAL_IDS}
  task = {name: getattr(vocab, name) for name in SPECIAL_IDS}
  task['stop_ids'] = tuple(task['stop_ids'])
  if model != task:
    show = lambda ids: ', '.join(f'{k}={v}' for k, v in ids.items())
    raise errors.ConfigError(
        f'the model\'s special ids ({show(model)}) are not the task '
        f'vocabulary\'s ({show(task)}): set the model section\'s to the '
        f'vocabulary\'s.')
  mixture = model_config.mixture
  if mixture is None:
    return
  first = getattr(vocab, 'intensity_offset', None)
  if first is None:
    raise errors.ConfigError(
        'a mixture output (model.mixture_components) is over the ordered '
        'values of an image task; this task\'s tokens are not ordered '
        'values: set model.mixture_components=0.')
  if mixture.first_id != first:
    raise errors.ConfigError(
        f'model.mixture_first_id={mixture.first_id}: a mixture output is '
        f'over the ordered values of an image task, whose first id is '
        f'{first}: set model.mixture_first_id to it.')


def random_model(config, vocab_size: int) -> Transformer:
  """The config's model with its seed's random weights: what the bench and
  draft jobs measure with --init=random, no checkpoint needed."""
  return Transformer(model_config_from(config, vocab_size),
                     rngs=nnx.Rngs(config.seed))


def restore_model(config, workdir: str, vocab_size: int) -> Transformer:
  """The config's model with the latest checkpoint's parameters in
  WORKDIR/checkpoints (see `params_from_checkpoint` for the errors)."""
  return restore(config, workdir, vocab_size)[0]


def restore(config, workdir: str, vocab_size: int,
            base_folder: str | None = None) -> tuple[Transformer, int]:
  """(model, step): `restore_model`'s model, and the step it restored.

  A frozen imported base is read from the folder its checkpoint records,
  or, where that is gone, from `base_folder`, else train.init_from
  (`with_recorded_base`).
  """
  model_config = model_config_from(config, vocab_size)
  graphdef, params = nnx.split(Transformer(model_config, rngs=nnx.Rngs(0)))
  folders = [folder for folder in (base_folder, config.train.init_from)
             if folder]
  params, step = params_from_checkpoint(
      params, model_config, os.path.join(workdir, 'checkpoints'),
      heads=True, read_unverified=config.train.read_unverified,
      base_folders=folders)
  return nnx.merge(graphdef, params), step


# The fields of a model that a run chooses for itself (its heads, their
# dropout, dtypes, input width); every other field is the architecture of
# the base, which an imported checkpoint fixes.
RUN_FIELDS = ('num_proposal_heads', 'head_layer', 'head_hidden',
              'head1_from_base', 'draft_source', 'draft_feature_layers',
              'block_layers', 'correction_recurrent', 'dropout_rate',
              'dtype', 'param_dtype', 'max_source_len')
ARCHITECTURE = tuple(field.name for field in dataclasses.fields(
    TransformerConfig) if field.name not in RUN_FIELDS)


def warm_start(params: nnx.State, model_config: TransformerConfig,
               directory: str, read_unverified: bool = False,
               heads: bool = False) -> nnx.State:
  """`params` with the base of another model; the heads keep theirs, or
  take the other run's too.

  Args:
    params: the run's freshly initialised parameters.
    model_config: the run's architecture.
    directory: a run's workdir (its latest checkpoint), or a Hugging Face
      model folder of a family models/imports reads (Llama, Mistral,
      Qwen2, GPT-2, ...), whose architecture must be the run's.
    read_unverified: as in `params_from_checkpoint`.
    heads: take the run's proposal heads too (train.init_heads: a drafter
      trained on a frozen base, then fine-tuned with it); its head layer
      and number of heads must be the run's. An imported checkpoint has
      none.

  Raises:
    errors.MissingFileError, errors.CheckpointError: as
      `params_from_checkpoint`, or the folder's files are missing.
    errors.DataError: a broken checkpoint folder (models/imports).
    errors.ConfigError: the other model's architecture is not the run's,
      or `heads` with an imported checkpoint or a run of other heads.
  """
  if not imports.is_checkpoint(directory):
    return params_from_checkpoint(
        params, model_config, os.path.join(directory, 'checkpoints'),
        heads=heads, read_unverified=read_unverified)[0]
  if heads:
    raise errors.ConfigError(
        f'train.init_heads: {directory} is an imported checkpoint, which '
        f'has no proposal heads to start from; init_heads takes the heads '
        f'of a run of this project (its workdir).')
  pretrained = imports.load_model(
      directory, **{name: getattr(model_config, name) for name in RUN_FIELDS})
  differ = [f'{name}={getattr(model_config, name)!r} (the checkpoint: '
            f'{getattr(pretrained.config, name)!r})'
            for name in ARCHITECTURE
            if getattr(model_config, name) != getattr(pretrained.config, name)]
  if differ:
    raise errors.ConfigError(
        f'the checkpoint in {directory} is another architecture than the '
        f'model section: {", ".join(differ)}. configs/hf_heads.py sets the '
        f'model section from its config files.')
  # The same architecture and heads: the same structure, leaf for leaf.
  take_base = lambda path, own, theirs: own if _is_head(path) else theirs
  return jax.tree_util.tree_map_with_path(take_base, params,
                                          nnx.state(pretrained, nnx.Param))


def warm_started_model(config, vocab_size: int) -> Transformer:
  """The config's model with train.init_from's base and new heads of the
  config's seed: what a job reads of a run that has no checkpoint yet but
  starts from an imported model (the distill job continuing prompts with
  it, before any head is trained)."""
  model_config = model_config_from(config, vocab_size)
  graphdef, params = nnx.split(Transformer(model_config,
                                           rngs=nnx.Rngs(config.seed)))
  return nnx.merge(graphdef, warm_start(params, model_config,
                                        config.train.init_from,
                                        config.train.read_unverified))


def params_from_checkpoint(params: nnx.State,
                           model_config: TransformerConfig, directory: str,
                           heads: bool, read_unverified: bool = False,
                           base_folders=()) -> tuple[nnx.State, int]:
  """(`params` with values from the latest checkpoint of a run, its step).

  Args:
    params: the parameters to fill (their structure, shapes and dtypes).
    model_config: their architecture (a frozen imported base is rebuilt
      with it).
    directory: a checkpoint directory (WORKDIR/checkpoints).
    heads: take the proposal heads too; if False they keep their values
      (a warm start of new heads on a trained base).
    read_unverified: read a step without checksums (`checkpoints.py`).
    base_folders: where to read a frozen imported base whose recorded
      folder is gone (`with_recorded_base`).

  Raises:
    errors.MissingFileError: no checkpoint there, or its frozen base's
      folder is gone.
    errors.CheckpointError: none of its steps reads back intact.
    BaseChanged: the frozen base's folder holds other weights.
    errors.ConfigError: a parameter is missing there or has another shape.
  """
  step, saved, meta = checkpoints_lib.restore_latest_params(
      directory, read_unverified=read_unverified)
  record = meta.get(BASE_RECORD)
  if record is not None:  # The checkpoint holds the heads alone.
    params = with_recorded_base(params, model_config, record,
                                f'checkpoint step {step} in {directory}',
                                base_folders)

  def take(path, value):
    keys = [str(getattr(p, 'key', getattr(p, 'name', p))) for p in path]
    if keys[0] == 'heads' and not heads:
      return value
    if keys[0] != 'heads' and record is not None:
      return value  # The base, just read from its folder.
    node = saved
    for key in keys:
      node = node.get(key) if isinstance(node, dict) else None
      if node is None:
        raise errors.ConfigError(f'{"/".join(keys)} is not in the checkpoint '
                                 f'in {directory}: is it a run of another '
                                 f'model?')
    if node.shape != value.shape:
      raise errors.ConfigError(f'{"/".join(keys)} has shape {node.shape} in '
                               f'{directory}; the model needs {value.shape}.')
    return jnp.asarray(node, value.dtype)

  return jax.tree_util.tree_map_with_path(take, params), step


# The entry of a checkpoint's meta record (`Checkpoints.meta`) that holds,
# instead of a frozen imported base's weights, their folder and
# fingerprint (`base_record`).
BASE_RECORD = 'frozen_base'


class BaseChanged(errors.CheckpointError):
  """The folder of a run's frozen imported base holds other weights than
  those its heads were trained on."""


def frozen_imported_base(train_config) -> str | None:
  """The folder of the imported model a run trains heads on without ever
  changing it, or None.

  That is train.init_from where it names an imported checkpoint (a
  Hugging Face folder), train.freeze_base is set and no phase trains the
  base (train.base_steps=0: configs/hf_heads.py). Such a run saves its
  heads alone (`base_record`). A frozen base trained by the project (a
  base phase, or another run's checkpoint) is saved whole.
  """
  folder = train_config.init_from
  if (folder and train_config.freeze_base and not train_config.base_steps
      and imports.is_checkpoint(folder)):
    return folder
  return None


def base_fingerprint(params: nnx.State) -> str:
  """The fingerprint (`checkpoints.fingerprint`) of every parameter but
  the heads'."""
  return checkpoints_lib.fingerprint(
      {jax.tree_util.keystr(path): value
       for path, value in jax.tree_util.tree_leaves_with_path(params)
       if not _is_head(path)})


def base_record(params: nnx.State, folder: str) -> dict:
  """What a checkpoint of heads on a frozen imported base records of the
  base instead of its weights: the folder (absolute) and the fingerprint
  of `params`' base as imported from there."""
  return dict(folder=os.path.abspath(folder),
              fingerprint=base_fingerprint(params))


def heads_of(params: nnx.State) -> nnx.State:
  """The proposal heads' part of `params`: what a checkpoint of a frozen
  imported base holds."""
  return nnx.split_state(params, nnx.PathContains('heads'), ...)[0]


def with_recorded_base(params: nnx.State, model_config: TransformerConfig,
                       record: dict, where: str,
                       base_folders=()) -> nnx.State:
  """`params` with the base a checkpoint recorded (`base_record`) read
  from its folder; the heads keep their values.

  Args:
    params: the run's parameters (their structure and dtypes).
    model_config: the run's architecture.
    record: the checkpoint's `base_record`.
    where: the checkpoint, as messages name it.
    base_folders: folders to read instead where the recorded one is no
      model folder now (moved): the first that is one. Any folder serves
      whose weights have the recorded fingerprint.

  Raises:
    errors.MissingFileError: neither the recorded folder nor one of
      `base_folders` is a model folder.
    BaseChanged: the folder's weights are not those recorded.
    errors.ConfigError, errors.DataError: as `warm_start`.
  """
  recorded = record['folder']
  folder = next((f for f in (recorded, *base_folders)
                 if imports.is_checkpoint(f)), None)
  if folder is None:
    raise errors.MissingFileError(
        f'{where} holds proposal heads on the frozen model of {recorded}, '
        f'which is no model folder now (moved or deleted): put the folder '
        f'back there, or give its new place (bpd_jax.load_run\'s '
        f'base_folder, or train.init_from).')
  params = warm_start(params, model_config, folder)
  found = base_fingerprint(params)
  if found != record['fingerprint']:
    raise BaseChanged(
        f'the model folder {folder} holds other weights than the frozen '
        f'base the heads of {where} were trained on: fingerprints {found} '
        f'(the folder now) vs {record["fingerprint"]} (recorded). Put its '
        f'weights back, or train new heads on it in another workdir.')
  return params


def _is_head(path) -> bool:
  return str(getattr(path[0], 'key', path[0])) == 'heads'
