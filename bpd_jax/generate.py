"""Decoding a Transformer: wires `bpd_jax.models` to `bpd_jax.decoding`.

        from bpd_jax import generate
    from bpd_jax.models import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.from_size(
        'tiny', vocab_size=100, num_proposal_heads=4), rngs=nnx.Rngs(0))
    source = jnp.array([[5, 6, 7, 1]])  # right-padded with pad_id
    reference = generate.greedy(model, source, max_len=32)
    fast = generate.blockwise(model, source, k=4, max_len=32)
    # fast.tokens == reference.tokens; fast.model_calls <= reference's.

`inputs` is the source for an encoder-decoder (decoding starts from bos_id)
and the prompt for a decoder-only model; in both cases [batch, length] token
ids, right-padded with pad_id. Inputs are checked before anything is
compiled; each problem raises ValueError naming the value and the limit.

The decoders run as one jitted function (model call, verification,
acceptance and cache bookkeeping inside one `lax.while_loop`); repeated calls
with the same shapes and options reuse the compiled program. Pass a `mesh`
to shard the batch over its `batch_axis` (parameters are replicated).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax import decoding
from bpd_jax.decoding import prompt as prompt_lib
from bpd_jax.models.transformer import Transformer


@dataclasses.dataclass(frozen=True)
class _Options:
  """Static decoding options (hashable: part of the compilation key)."""
  greedy: bool  # The greedy decoder; otherwise blockwise with the rest.
  max_len: int
  k: int = 1
  criterion: decoding.Criterion = decoding.Exact()
  min_block: int = 1


def greedy(model: Transformer, inputs, *, max_len: int, mesh=None,
           batch_axis: str = 'data') -> decoding.DecodeResult:
  """Greedy decoding (the reference output of exact blockwise decoding).

  Args:
    model: the Transformer.
    inputs: [batch, length] source (encoder-decoder) or prompt (decoder-only)
      token ids, right-padded with pad_id.
    max_len: most tokens to generate per example.
    mesh: optional `jax.sharding.Mesh` to shard the batch over.
    batch_axis: the mesh axis the batch is split along.

  Returns:
    DecodeResult: tokens [batch, max_len] and per-example statistics.
  """
  return _run(model, inputs, _Options(greedy=True, max_len=max_len), mesh,
              batch_axis)


def blockwise(model: Transformer, inputs, *, k: int, max_len: int,
              criterion: decoding.Criterion = decoding.Exact(),
              min_block: int = 1, mesh=None,
              batch_axis: str = 'data') -> decoding.DecodeResult:
  """Blockwise parallel decoding with the model's proposal heads.

  Args:
    model: the Transformer; it must have at least k proposal heads.
    inputs: [batch, length] source (encoder-decoder) or prompt (decoder-only)
      token ids, right-padded with pad_id.
    k: block size, 1 <= k <= model.config.num_proposal_heads.
    max_len: most tokens to generate per example.
    criterion: Exact() (output identical to greedy), TopK(t) or Distance(eps).
    min_block: l, the fewest tokens appended per call, 1 <= l <= k.
    mesh: optional `jax.sharding.Mesh` to shard the batch over.
    batch_axis: the mesh axis the batch is split along.

  Returns:
    DecodeResult: tokens [batch, max_len] and per-example statistics.
  """
  heads = model.config.num_proposal_heads
  if not isinstance(k, int) or not 1 <= k <= heads:
    raise ValueError(f'k={k!r} must be an integer in [1, {heads}], the '
                     f"model's number of proposal heads.")
  if not isinstance(min_block, int) or not 1 <= min_block <= k:
    raise ValueError(f'min_block={min_block!r} must be an integer in '
                     f'[1, k={k}].')
  if not isinstance(criterion, decoding.Criterion):
    raise ValueError(f'criterion={criterion!r} is not a decoding.Criterion.')
  if (isinstance(criterion, decoding.TopK)
      and criterion.t > model.config.vocab_size):
    raise ValueError(f'top-k verification t={criterion.t} exceeds the '
                     f'vocabulary size {model.config.vocab_size}.')
  return _run(model, inputs, _Options(greedy=False, max_len=max_len, k=k,
                       criterion=criterion, min_block=min_block), mesh,
              batch_axis)


def check_inputs(config, inputs, max_len: int, k: int = 1) -> np.ndarray:
  """Validates decoder inputs; returns them as an int32 numpy array.

  Raises:
    ValueError: naming the offending value and its limit.
  """
  if not isinstance(max_len, (int, np.integer)) or max_len < 1:
    raise ValueError(f'max_len={max_len!r} must be an integer >= 1.')
  array = np.asarray(inputs)
  if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
    raise ValueError(f'inputs must be [batch, length] with batch, length >= '
                     f'1; got shape {array.shape}.')
  if not np.issubdtype(array.dtype, np.integer):
    raise ValueError(f'inputs must be integer token ids; got {array.dtype}.')
  bad = (array < 0) | (array >= config.vocab_size)
  if bad.any():
    i, j = np.argwhere(bad)[0]
    raise ValueError(f'token id {array[i, j]} at inputs[{i}, {j}] is outside '
                     f'the vocabulary [0, {config.vocab_size}).')
  valid = array != config.pad_id
  lengths = valid.sum(axis=1)
  if (lengths == 0).any():
    raise ValueError(f'example {np.argmin(lengths)} of the inputs is empty '
                     f'(only pad_id={config.pad_id}).')
  trailing = np.arange(array.shape[1])[None, :] < lengths[:, None]
  if (valid != trailing).any():
    raise ValueError(f'example {np.argmax((valid != trailing).any(axis=1))} '
                     f'has pad_id={config.pad_id} before a token: inputs '
                     f'must be right-padded.')
  longest = int(lengths.max())
  if config.is_encoder_decoder:
    if longest > config.max_source_len:
      raise ValueError(f'an input of {longest} tokens exceeds '
                       f'max_source_len={config.max_source_len}.')
    array = array[:, :config.max_source_len]
    needed = prompt_lib.required_positions(1, max_len, k)
  else:
    needed = prompt_lib.required_positions(array.shape[1], max_len, k)
  if needed > config.max_target_len:
    raise ValueError(
        f'decoding {max_len} tokens (k={k}) after a prompt of '
        f'{1 if config.is_encoder_decoder else array.shape[1]} needs {needed} '
        f'decoder positions; the model has max_target_len='
        f'{config.max_target_len}. Lower max_len or raise max_target_len.')
  return array.astype(np.int32)


def _run(model, inputs, options: _Options, mesh, batch_axis):
  inputs = check_inputs(model.config, inputs, options.max_len, options.k)
  if mesh is not None:
    size = mesh.shape[batch_axis]
    if inputs.shape[0] % size:
      raise ValueError(f'batch size {inputs.shape[0]} is not divisible by '
                       f'the {size} devices of mesh axis {batch_axis!r}.')
    sharding = jax.sharding.NamedSharding
    inputs = jax.device_put(
        inputs, sharding(mesh, jax.sharding.PartitionSpec(batch_axis)))
    model = jax.device_put(model,
                           sharding(mesh, jax.sharding.PartitionSpec()))
  return _decode(model, inputs, options)


# NNX modules are pytrees, so the model goes into `jit` as it is: flattening
# it costs ~0.5 ms a call where `nnx.split` costs ~4 ms (Transformer-small),
# which matters when a whole decode takes a few milliseconds. The model's
# structure and config are the static part of the compilation key.
@functools.partial(jax.jit, static_argnames=('options',))
def _decode(model: Transformer, inputs, options: _Options):
  config = model.config
  batch = inputs.shape[0]
  if config.is_encoder_decoder:
    source = inputs
    prompt = jnp.full((batch, 1), config.bos_id, jnp.int32)
  else:
    source, prompt = None, inputs
  prompt_lengths = (prompt != config.pad_id).sum(axis=1).astype(jnp.int32)
  k = options.k
  cache = model.init_cache(
      batch, prompt_lib.required_positions(prompt.shape[1], options.max_len,
                                           k), source)
  weights = model.decoding_weights(k)  # Laid out once, outside the loop.
  fns = decoding.DecodingFns(
      extend=model.extend,
      next_token_logits=functools.partial(model.next_token_logits,
                                          weights=weights),
      proposal_logits=functools.partial(model.proposal_logits, k=k,
                                        weights=weights))
  ids = dict(max_len=options.max_len, eos_id=config.eos_id,
             pad_id=config.pad_id)
  if options.greedy:
    return decoding.greedy_decode(fns, cache, prompt, prompt_lengths, **ids)
  return decoding.blockwise_decode(
      fns, cache, prompt, prompt_lengths, k=k, criterion=options.criterion,
      min_block=options.min_block, **ids)
