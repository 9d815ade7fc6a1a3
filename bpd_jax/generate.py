"""Decoding a Transformer: wires `bpd_jax.models` to `bpd_jax.decoding`.

    from bpd_jax import generate
    from bpd_jax.models import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.from_size(
        'tiny', vocab_size=100, num_proposal_heads=4), rngs=nnx.Rngs(0))
    source = jnp.array([[5, 6, 7, 1]])  # right-padded with pad_id
    reference = generate.greedy(model, source, max_len=32)
    fast = generate.blockwise(model, source, k=4, max_len=32)
    # fast.tokens == reference.tokens; fast.model_calls <= reference's.

    # Many calls with the same weights: a Decoder takes them apart once.
    decoder = generate.Decoder(model)
    fast = decoder.blockwise(source, k=4, max_len=32)

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
from flax import nnx

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax import timing
from bpd_jax.decoding import prompt as prompt_lib
from bpd_jax.drafts import ngram as ngram_lib
from bpd_jax.models.transformer import DecodeCache, Transformer


@dataclasses.dataclass(frozen=True)
class _Options:
  """Static decoding options (hashable: part of the compilation key)."""
  greedy: bool  # The greedy decoder; otherwise blockwise with the rest.
  max_len: int
  k: int = 1
  criterion: decoding.Criterion = decoding.Exact()
  min_block: int = 1
  # Draft refinement, and the structure of a neural rescorer (its graphdef
  # and weight treedef; the weights themselves are arguments).
  refinement: decoding.Refinement | None = None
  rescorer_structure: tuple | None = None


class Decoder:
  """Greedy and blockwise decoding with one model's weights.

  Every call hands the weights to the compiled decoder. Passing the NNX
  module itself means flattening its object graph and hashing its structure
  for the compilation cache on every call (~0.3 ms for the demo model, a
  third of decoding a sentence at batch 1). A Decoder takes the model apart
  once: its compiled programs close over the structure, and a call passes
  only the flat list of weight arrays. It holds the weights as they were
  when it was made: after changing the model (more training), make a new
  one. `greedy` and `blockwise`, the module functions, take the model
  itself and suit one-off calls.
  """

  def __init__(self, model: Transformer, mesh=None,
               batch_axis: str = 'data'):
    """Takes the model apart (and replicates it over `mesh`, if given).

    Args:
      model: the Transformer.
      mesh: optional `jax.sharding.Mesh` to shard each batch over.
      batch_axis: the mesh axis the batch is split along.
    """
    self.model = _replicate(model, mesh)
    self.config = model.config
    self.mesh, self.batch_axis = mesh, batch_axis
    graphdef, weights = nnx.split(self.model)
    self._weights, treedef = jax.tree_util.tree_flatten(weights)
    self._decode = _structure_decoder(graphdef, treedef)
    self._layouts = {}  # k -> DecodingWeights, made on first use.

  def compilations(self) -> int:
    """Programs compiled for this model structure (to see recompiles)."""
    return self._decode._cache_size()  # pylint: disable=protected-access

  def greedy(self, inputs, *, max_len: int) -> decoding.DecodeResult:
    """Greedy decoding (the reference output of exact blockwise decoding).

    Args:
      inputs: [batch, length] source (encoder-decoder) or prompt
        (decoder-only) token ids, right-padded with pad_id.
      max_len: most tokens to generate per example.

    Returns:
      DecodeResult: tokens [batch, max_len] and per-example statistics.
    """
    return self._run(inputs, _Options(greedy=True, max_len=max_len))

  def blockwise(self, inputs, *, k: int | str, max_len: int,
                criterion: decoding.Criterion = decoding.Exact(),
                min_block: int = 1,
                tuning: auto_k.AutoK | None = None,
                refinement: decoding.Refinement | None = None,
                rescorer=None) -> decoding.DecodeResult:
    """Blockwise parallel decoding with the model's proposal heads.

    Args:
      inputs: [batch, length] source (encoder-decoder) or prompt
        (decoder-only) token ids, right-padded with pad_id.
      k: block size, 1 <= k <= the model's num_proposal_heads; or 'auto':
        the k `tuning` expects to be fastest at this batch size on this
        machine, greedy decoding where no k pays (see `tune_k`).
      max_len: most tokens to generate per example.
      criterion: Exact() (output identical to greedy), TopK(t) or
        Distance(eps).
      min_block: l, the fewest tokens appended per call, 1 <= l <= k.
      tuning: from `tune_k`, for k='auto'.
      refinement: draft refinement (Kim et al. 2024): p drafts from the
        heads' top-t lattice verified per call; None: plain drafts.
      rescorer: the refinement's language model: an `ngram.NgramModel`
        ('ngram') or a decoder-only Transformer on the same vocabulary
        ('neural', `bpd_jax.drafts.lm`); None for 'none'.

    Returns:
      DecodeResult: tokens [batch, max_len] and per-example statistics; its
      block_sizes has k + 1 columns (2 where 'auto' chose greedy decoding).
    """
    if refinement is not None and k == 'auto':
      raise ValueError("k='auto' does not take a refinement.")
    if k == 'auto':
      k = self._auto_k(inputs, max_len, criterion, min_block, tuning)
      if k == 1:
        return self.greedy(inputs, max_len=max_len)
    config = self.config
    heads = config.num_proposal_heads
    if not isinstance(k, int) or not 1 <= k <= heads:
      raise ValueError(f'k={k!r} must be an integer in [1, {heads}], the '
                       f"model's number of proposal heads.")
    if not isinstance(min_block, int) or not 1 <= min_block <= k:
      raise ValueError(f'min_block={min_block!r} must be an integer in '
                       f'[1, k={k}].')
    if not isinstance(criterion, decoding.Criterion):
      raise ValueError(f'criterion={criterion!r} is not a '
                       f'decoding.Criterion.')
    if (isinstance(criterion, decoding.TopK)
        and criterion.t > config.vocab_size):
      raise ValueError(f'top-k verification t={criterion.t} exceeds the '
                       f'vocabulary size {config.vocab_size}.')
    refinement, rescorer_args, structure = _refinement(
        config, k, refinement, rescorer)
    return self._run(inputs, _Options(greedy=False, max_len=max_len, k=k,
                                      criterion=criterion,
                                      min_block=min_block,
                                      refinement=refinement,
                                      rescorer_structure=structure),
                     rescorer_args)

  def _auto_k(self, inputs, max_len, criterion, min_block, tuning) -> int:
    """The k that `tuning` picks for this input (1: greedy decoding)."""
    if not isinstance(tuning, auto_k.AutoK):
      raise ValueError("k='auto' needs tuning=generate.tune_k(model, "
                       "calibration_inputs, max_len=...).")
    if criterion.spec != tuning.criterion:
      raise ValueError(f'the tuning holds for criterion '
                       f'{tuning.criterion!r}, not {criterion.spec!r}: tune '
                       f'with the criterion you decode with.')
    if min_block != 1:
      raise ValueError(f"k='auto' takes min_block=1, not {min_block}.")
    shape = np.shape(inputs)
    if len(shape) != 2:
      raise ValueError(f'inputs must be [batch, length]; got shape {shape}.')
    return tuning.choose(
        (shape[0], shape[1], max_len),
        lambda k: self.iteration_seconds(k, shape[0], shape[1], max_len))

  def _run(self, inputs, options: _Options,
           rescorer=None) -> decoding.DecodeResult:
    inputs = self._place(check_inputs(self.config, inputs, options.max_len,
                                      options.k))
    return self._decode(self._weights, self._layout(options.k), inputs,
                        options=options, rescorer=rescorer)

  def iteration_seconds(self, k: int, batch_size: int, source_len: int,
                        max_len: int, repeats: int = 5) -> float:
    """Seconds of one iteration of the decoding loop (k = 1: greedy's).

    The real loop, model call and bookkeeping, at this shape: the slope of
    the decode's time between two forced loop lengths (`timing`), so that
    the encoder, the prompt pass and the call's fixed cost cancel out.

    Args:
      k: block size; 1 times the greedy decoder.
      batch_size: examples per call.
      source_len: input length (source or prompt).
      max_len: tokens a decode generates at most (sets the buffer sizes).
      repeats: timings of each loop length; the fastest is kept.
    """
    options = (_Options(greedy=True, max_len=max_len) if k == 1 else
               _Options(greedy=False, max_len=max_len, k=k))
    inputs = self._place(check_inputs(
        self.config, np.full((batch_size, source_len), self.config.eos_id),
        max_len, options.k))
    layout = self._layout(options.k)
    return timing.per_iteration_seconds(
        lambda n: jax.block_until_ready(self._decode(
            self._weights, layout, inputs, options=options,
            iterations=np.int32(n))), repeats)

  def _layout(self, k: int):
    """The output weights of k heads laid out for decoding, once.

    Inside a decode they would be laid out again on every call (the
    vocabulary table transposed, the heads' weights sliced), a fixed cost
    that weighs most at batch 1.
    """
    if k not in self._layouts:
      layout = _output_layout(self.model, k)
      if self._layouts:  # One vocabulary table serves every k.
        vocab = next(iter(self._layouts.values())).vocab
        layout = dataclasses.replace(layout, vocab=vocab)
      self._layouts[k] = layout
    return self._layouts[k]

  def _place(self, inputs: np.ndarray):
    """Shards the batch over the mesh, if any."""
    if self.mesh is None:
      return inputs
    size = self.mesh.shape[self.batch_axis]
    if inputs.shape[0] % size:
      raise ValueError(f'batch size {inputs.shape[0]} is not divisible by '
                       f'the {size} devices of mesh axis '
                       f'{self.batch_axis!r}.')
    return jax.device_put(inputs, jax.sharding.NamedSharding(
        self.mesh, jax.sharding.PartitionSpec(self.batch_axis)))


class _ModelDecoder(Decoder):
  """A Decoder that hands the model itself to the compiled decoder.

  For one-off calls: taking a model apart (`nnx.split`, ~4 ms for a small
  one) and compiling for it costs more than flattening it (~0.3 ms).
  """

  def __init__(self, model: Transformer, mesh, batch_axis):
    self.model = _replicate(model, mesh)
    self.config = model.config
    self.mesh, self.batch_axis = mesh, batch_axis

  def compilations(self) -> int:
    return compiled_decoders()

  def iteration_seconds(self, *args, **kwargs) -> float:
    # Timing runs many calls: a Decoder's are the cheap ones.
    return Decoder(self.model, self.mesh, self.batch_axis).iteration_seconds(
        *args, **kwargs)

  def _run(self, inputs, options: _Options,
           rescorer=None) -> decoding.DecodeResult:
    inputs = self._place(check_inputs(self.config, inputs, options.max_len,
                                      options.k))
    return _decode(self.model, inputs, options, rescorer=rescorer)


def greedy(model: Transformer, inputs, *, max_len: int, mesh=None,
           batch_axis: str = 'data') -> decoding.DecodeResult:
  """Greedy decoding; see `Decoder.greedy` (and Decoder, for many calls).

  Args:
    model: the Transformer.
    inputs: [batch, length] source (encoder-decoder) or prompt (decoder-only)
      token ids, right-padded with pad_id.
    max_len: most tokens to generate per example.
    mesh: optional `jax.sharding.Mesh` to shard the batch over.
    batch_axis: the mesh axis the batch is split along.
  """
  return _ModelDecoder(model, mesh, batch_axis).greedy(inputs,
                                                       max_len=max_len)


def blockwise(model: Transformer, inputs, *, k: int | str, max_len: int,
              criterion: decoding.Criterion = decoding.Exact(),
              min_block: int = 1, tuning: auto_k.AutoK | None = None,
              mesh=None, batch_axis: str = 'data',
              refinement: decoding.Refinement | None = None,
              rescorer=None) -> decoding.DecodeResult:
  """Blockwise decoding; see `Decoder.blockwise` for the arguments.

  Args:
    model: the Transformer; it must have at least k proposal heads.
    inputs, k, max_len, criterion, min_block, tuning, refinement, rescorer:
      as `Decoder.blockwise`.
    mesh: optional `jax.sharding.Mesh` to shard the batch over.
    batch_axis: the mesh axis the batch is split along.
  """
  return _ModelDecoder(model, mesh, batch_axis).blockwise(
      inputs, k=k, max_len=max_len, criterion=criterion,
      min_block=min_block, tuning=tuning, refinement=refinement,
      rescorer=rescorer)


def tune_k(model: Transformer | Decoder, inputs, *, max_len: int,
           criterion: decoding.Criterion = decoding.Exact(),
           batch_size: int = 8, margin: float = 0.05,
           candidates=None) -> auto_k.AutoK:
  """Acceptance statistics for k='auto', from a decode at the largest k.

  Args:
    model: the Transformer, or a Decoder of it (whose compiled programs are
      then reused).
    inputs: [examples, length] calibration inputs, like the ones to decode
      (e.g. training sources: not the data the decodes are judged on).
    max_len: most tokens to generate per example.
    criterion: the verification criterion the decodes will use.
    batch_size: examples decoded together here (no effect on the
      statistics).
    margin: the fraction of greedy's expected time blockwise decoding must
      save to be chosen.
    candidates: the block sizes to choose from (greedy always is one);
      None: every k up to the model's heads.

  Returns:
    AutoK; it measures this machine's step costs for each new batch shape
    it is asked about, and can be saved with `save`.
  """
  inputs = np.asarray(inputs)
  k = model.config.num_proposal_heads
  decoder = model if isinstance(model, Decoder) else Decoder(model)
  appended = []
  for start in range(0, len(inputs), batch_size):
    chunk = inputs[start:start + batch_size]
    result = decoder.blockwise(chunk, k=k, max_len=max_len,
                               criterion=criterion)
    appended.append(np.asarray(result.block_sizes))
  return auto_k.AutoK(np.concatenate(appended), criterion.spec, margin,
                      candidates)


def memory_bytes(model: Transformer, inputs, *, max_len: int, k: int = 0,
                 criterion: decoding.Criterion = decoding.Exact(),
                 min_block: int = 1) -> int:
  """Peak memory of a decode: the whole model, the program's buffers.

  Compiles the decoder ahead of time for this input shape (k = 0: greedy)
  and reads XLA's memory analysis: inputs, outputs and temporaries, plus
  every parameter of the model (XLA leaves out the ones a program does not
  read, such as greedy decoding's proposal heads, but they are in memory
  all the same).
  """
  options = (_Options(greedy=True, max_len=max_len) if not k else
             _Options(greedy=False, max_len=max_len, k=k,
                      criterion=criterion, min_block=min_block))
  inputs = check_inputs(model.config, inputs, max_len, options.k)
  stats = _decode.lower(model, inputs, options).compile().memory_analysis()
  parameters = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model)))
  return int(parameters + inputs.nbytes + stats.output_size_in_bytes
             + stats.temp_size_in_bytes)


def compiled_decoders() -> int:
  """Programs the module functions have compiled (to see recompilations)."""
  return _decode._cache_size()  # pylint: disable=protected-access


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


def _refinement(config, k: int, refinement, rescorer):
  """(refinement completed from the rescorer, its device arguments, the
  static structure of a neural rescorer), after checking them."""
  if refinement is None:
    if rescorer is not None:
      raise ValueError('a rescorer was given without a refinement.')
    return None, None, None
  if not isinstance(refinement, decoding.Refinement):
    raise ValueError(f'refinement={refinement!r} is not a '
                     f'decoding.Refinement.')
  refinement.check(k, config.vocab_size)
  kind = refinement.rescorer
  if kind == 'none':
    if rescorer is not None:
      raise ValueError("rescorer 'none' takes no rescorer model.")
    return dataclasses.replace(refinement, context=0), None, None
  if kind == 'ngram':
    if not isinstance(rescorer, ngram_lib.NgramModel):
      raise ValueError("rescorer 'ngram' needs an ngram.NgramModel.")
    if rescorer.vocab_size != config.vocab_size:
      raise ValueError(f'the n-gram model has a vocabulary of '
                       f'{rescorer.vocab_size}, the model '
                       f'{config.vocab_size}.')
    return dataclasses.replace(
        refinement, context=rescorer.order - 1,
        start_id=config.bos_id), rescorer, None
  if not isinstance(rescorer, Transformer) or \
      rescorer.config.is_encoder_decoder:
    raise ValueError("rescorer 'neural' needs a decoder-only Transformer "
                     "(bpd_jax.drafts.lm).")
  lm_config = rescorer.config
  if lm_config.vocab_size != config.vocab_size:
    raise ValueError(f'the rescoring LM has a vocabulary of '
                     f'{lm_config.vocab_size}, the model {config.vocab_size}.')
  if refinement.context > lm_config.max_target_len:
    raise ValueError(f'the rescoring window of {refinement.context} tokens '
                     f'exceeds the LM\'s max_target_len='
                     f'{lm_config.max_target_len}.')
  graphdef, weights = nnx.split(rescorer)
  leaves, treedef = jax.tree_util.tree_flatten(weights)
  return (dataclasses.replace(refinement, start_id=config.bos_id), leaves,
          (graphdef, treedef))


def _rescore_fn(options: _Options, rescorer):
  """The refinement's `Rescore` function inside the jitted decode."""
  refinement = options.refinement
  if refinement is None or refinement.rescorer == 'none':
    return None
  if refinement.rescorer == 'ngram':
    return functools.partial(ngram_lib.log_prob, rescorer)
  graphdef, treedef = options.rescorer_structure
  lm = nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, rescorer))

  def next_token_log_probs(tokens):  # [rows, window] -> [rows, vocab]
    hidden = lm(None, tokens)[:, -1]
    return jax.nn.log_softmax(lm.logits(hidden).astype(jnp.float32))
  return next_token_log_probs


def _take_rows(cache: DecodeCache, rows: jax.Array) -> DecodeCache:
  """A draft's cache rows: the self-attention cache only. The encoder's
  memory is the same for every draft of an example, and drafts only move
  between rows of their own example."""
  return dataclasses.replace(cache, self_attention=jax.tree.map(
      lambda x: x[rows], cache.self_attention))


def _replicate(model, mesh):
  if mesh is None:
    return model
  return jax.device_put(model, jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec()))


def _decode_body(model: Transformer, inputs, options: _Options,
                 weights=None, iterations=None, rescorer=None):
  """The whole decode of a batch: encoder, prompt pass, decoding loop.

  `weights` are the model's `decoding_weights(options.k)`, laid out here
  when not given; `iterations` forces the loop's length (timing);
  `rescorer` holds the refinement's device arrays (an NgramModel, or a
  neural rescorer's flat weights).
  """
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
  if weights is None:  # Laid out once, outside the loop.
    weights = model.decoding_weights(k)
  fns = decoding.DecodingFns(
      extend=model.extend,
      next_token_logits=functools.partial(model.next_token_logits,
                                          weights=weights),
      proposal_logits=functools.partial(model.proposal_logits, k=k,
                                        weights=weights),
      take_rows=_take_rows)
  ids = dict(max_len=options.max_len, eos_id=config.eos_id,
             pad_id=config.pad_id, iterations=iterations)
  if options.greedy:
    return decoding.greedy_decode(fns, cache, prompt, prompt_lengths, **ids)
  return decoding.blockwise_decode(
      fns, cache, prompt, prompt_lengths, k=k, criterion=options.criterion,
      min_block=options.min_block, refinement=options.refinement,
      rescore=_rescore_fn(options, rescorer), **ids)


# The model as a pytree (module functions): its structure and config are the
# static part of the compilation key.
_decode = jax.jit(_decode_body, static_argnames=('options',))


@functools.lru_cache(maxsize=32)
def _structure_decoder(graphdef, treedef):
  """The jitted decoder of one model structure, taking its flat weights.

  Shared by Decoders of models with the same structure (e.g. one a periodic
  evaluation during training), so they reuse each other's compilations.
  """
  def decode(weights, layout, inputs, options, iterations=None,
             rescorer=None):
    weights = jax.tree_util.tree_unflatten(treedef, weights)
    return _decode_body(nnx.merge(graphdef, weights), inputs, options,
                        layout, iterations, rescorer)
  return jax.jit(decode, static_argnames=('options',))


@functools.partial(jax.jit, static_argnames=('k',))
def _output_layout(model: Transformer, k: int):
  return model.decoding_weights(k)

