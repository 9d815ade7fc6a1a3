"""Config -> model: the architecture of a config, random or restored.

The training job builds its model from `model_config_from`; the evaluation,
bench, draft and distillation jobs (through `bpd_jax/jobs.py`) take the
latest checkpoint of a run (`restore_model`) or the config's seeded random
weights (`random_model`). The vocabulary size comes from the task, which
the caller loads: nothing here reads data.
"""

import os

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.models import gpt2
from bpd_jax.models.positions import ImagePositions
from bpd_jax.models.rotary import RopeScaling
from bpd_jax.models.transformer import Transformer, TransformerConfig


def model_config_from(config, vocab_size: int) -> TransformerConfig:
  """The TransformerConfig of a config's `model` section (validated).

  The section is flat but for `rope_scaling` (None or a dict of
  RopeScaling's fields); the image fields become one ImagePositions.
  """
  fields = dict(config.model)
  image = ImagePositions.pop_from(fields)  # The flat model.*image* fields.
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
  would read padding as text.
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


def random_model(config, vocab_size: int) -> Transformer:
  """The config's model with its seed's random weights: what the bench and
  draft jobs measure with --init=random, no checkpoint needed."""
  return Transformer(model_config_from(config, vocab_size),
                     rngs=nnx.Rngs(config.seed))


def restore_model(config, workdir: str, vocab_size: int) -> Transformer:
  """The config's model with the latest checkpoint's parameters in
  WORKDIR/checkpoints (see `params_from_checkpoint` for the errors)."""
  model = Transformer(model_config_from(config, vocab_size),
                      rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model)
  params = params_from_checkpoint(
      params, os.path.join(workdir, 'checkpoints'), heads=True,
      read_unverified=config.train.read_unverified)
  return nnx.merge(graphdef, params)


def warm_start(params: nnx.State, model_config: TransformerConfig,
               directory: str, read_unverified: bool = False) -> nnx.State:
  """`params` with the base of another model; the heads keep theirs.

  Args:
    params: the run's freshly initialised parameters.
    model_config: the run's architecture.
    directory: a run's workdir (its latest checkpoint), or a pretrained
      GPT-2 folder (config.json and model.safetensors, models/gpt2.py).
    read_unverified: as in `params_from_checkpoint`.

  Raises:
    errors.MissingFileError, errors.CheckpointError: as
      `params_from_checkpoint`, or the GPT-2 folder's files are missing.
    errors.ConfigError: the other model's architecture is not the run's.
  """
  if not gpt2.is_checkpoint(directory):
    return params_from_checkpoint(
        params, os.path.join(directory, 'checkpoints'), heads=False,
        read_unverified=read_unverified)
  pretrained = gpt2.load_gpt2(
      directory, num_proposal_heads=model_config.num_proposal_heads,
      head_layer=model_config.head_layer,
      head_hidden=model_config.head_hidden,
      draft_feature_layers=model_config.draft_feature_layers,
      dtype=model_config.dtype,
      param_dtype=model_config.param_dtype)
  differ = [f'{name}={getattr(model_config, name)!r} (the checkpoint: '
            f'{getattr(pretrained.config, name)!r})'
            for name in _ARCHITECTURE
            if getattr(model_config, name) != getattr(pretrained.config, name)]
  if differ:
    raise errors.ConfigError(
        f'the GPT-2 in {directory} is another architecture than the model '
        f'section: {", ".join(differ)}. configs/gpt2_heads.py sets the '
        f'model from its config.json.')
  # The same architecture and heads: the same structure, leaf for leaf.
  take_base = lambda path, own, theirs: own if _is_head(path) else theirs
  return jax.tree_util.tree_map_with_path(take_base, params,
                                          nnx.state(pretrained, nnx.Param))


# The fields of a model's base a pretrained checkpoint must share with the
# run (the proposal heads' fields are the run's own).
_ARCHITECTURE = ('vocab_size', 'd_model', 'd_ff', 'num_heads',
                 'num_kv_heads', 'head_dim', 'num_encoder_layers',
                 'num_decoder_layers', 'pre_norm', 'norm', 'feed_forward',
                 'positions', 'rope_theta', 'rope_scaling', 'max_target_len',
                 'share_embeddings', 'tie_output', 'activation',
                 'layer_norm_epsilon', 'qkv_bias', 'out_bias', 'ffn_bias',
                 'scale_embeddings', 'pad_id', 'eos_id', 'bos_id')


def params_from_checkpoint(params: nnx.State, directory: str, heads: bool,
                           read_unverified: bool = False) -> nnx.State:
  """`params` with values from the latest checkpoint of another run.

  Args:
    params: the parameters to fill (their structure, shapes and dtypes).
    directory: a checkpoint directory (WORKDIR/checkpoints).
    heads: take the proposal heads too; if False they keep their values
      (a warm start of new heads on a trained base).
    read_unverified: read a step without checksums (`checkpoints.py`).

  Raises:
    errors.MissingFileError: no checkpoint there.
    errors.CheckpointError: none of its steps reads back intact.
    errors.ConfigError: a parameter is missing there or has another shape.
  """
  saved = checkpoints_lib.restore_params_dict(
      directory, read_unverified=read_unverified)

  def take(path, value):
    keys = [str(getattr(p, 'key', getattr(p, 'name', p))) for p in path]
    if keys[0] == 'heads' and not heads:
      return value
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

  return jax.tree_util.tree_map_with_path(take, params)


def _is_head(path) -> bool:
  return str(getattr(path[0], 'key', path[0])) == 'heads'