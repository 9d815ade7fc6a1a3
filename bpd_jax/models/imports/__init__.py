"""Checkpoints of other libraries, as the project's Transformer.

    from bpd_jax.models import imports

    model = imports.load_model('/path/to/Llama-3.2-1B', num_proposal_heads=4,
                               head_layer='sequential')

A local Hugging Face folder (config.json, safetensors weights in one file
or shards, generation_config.json where present) is read without torch;
its config.json's model_type picks the family's importer:

- reader.py: the folder's config files and tensors (one reader for all).
- llama.py: 'llama', 'mistral', 'qwen2' (Llama 2 and 3, Mistral, Qwen2,
  SmolLM2, TinyLlama, ...).
- gpt2.py: 'gpt2'.

Imported models keep the checkpoint's vocabulary and token ids, so that
prompts and outputs are those of transformers and of the checkpoint's
tokenizer (tasks/text/hf_vocab.py): eos_id is its end token (stop_ids the
other end tokens generation_config.json lists), bos_id its start token,
pad_id its pad token where that is no other special token, else -1 (no id
pads). Parameters and computation take the stored dtype unless asked
otherwise. Every weight is checked (reader.py): stored in config.json's
dtype (headers, at config time), finite and with a weight's magnitudes
(as it is read), so that a header that misnames its bytes' dtype stops
the import. The proposal heads are new, seeded layers: train them on the
frozen base with configs/hf_heads.py.
"""

from types import ModuleType

from bpd_jax.infra import errors
from bpd_jax.models.imports import gpt2, llama, reader
from bpd_jax.models.transformer import Transformer, TransformerConfig

# config.json's model_type -> the importer of its family.
FAMILIES: dict[str, ModuleType] = {
    'gpt2': gpt2, **{name: llama for name in llama.MODEL_TYPES}}

is_checkpoint = reader.is_checkpoint


def family(checkpoint: reader.Checkpoint) -> ModuleType:
  """The importer module of the checkpoint's model_type.

  Raises:
    errors.ConfigError: a model_type no importer reads.
  """
  model_type = checkpoint.config.get('model_type')
  if model_type not in FAMILIES:
    raise errors.ConfigError(
        f'{checkpoint.folder}/{reader.CONFIG_FILE}: model_type '
        f'{model_type!r} is not imported; known: {sorted(FAMILIES)}.')
  return FAMILIES[model_type]


def config_from(folder: str, **fields) -> TransformerConfig:
  """The TransformerConfig of a Hugging Face folder; `fields` are the
  family's `config_from` options (dtype, param_dtype, max_target_len) and
  the fields the checkpoint does not fix (num_proposal_heads, head_layer,
  ...)."""
  checkpoint = reader.Checkpoint(folder)
  return family(checkpoint).config_from(checkpoint, **fields)


def load_model(folder: str, seed: int = 0, **fields) -> Transformer:
  """The Hugging Face folder's model as a Transformer (`config_from`'s
  fields), with new proposal heads of `seed`.

  Raises:
    errors.MissingFileError, errors.DataError: a missing or broken file
      or tensor (one line naming it).
    errors.ConfigError: a model the importers do not model.
  """
  checkpoint = reader.Checkpoint(folder)
  importer = family(checkpoint)
  return importer.load(checkpoint, importer.config_from(checkpoint, **fields),
                       seed=seed)
