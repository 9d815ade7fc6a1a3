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
    # The same decode, its options as one object (`decoding.DecodeOptions`).
    fast = decoder.decode(source, decoding.DecodeOptions(max_len=32, k=4))

k='auto' (the block size expected to be fastest on this machine) is
`auto_k.AutoDecoder`'s: it times the candidates' loops on this Decoder,
which itself never times anything.

`inputs` is the source for an encoder-decoder (decoding starts from bos_id)
and the prompt for a decoder-only model; in both cases [batch, length] token
ids, right-padded with pad_id (-1 for a model whose vocabulary has no pad
token). An example ends at eos_id or at any of the model's stop_ids (kept
in its output); its output is pad_id past the end. Options and inputs
are checked before anything is compiled; each problem raises ValueError
naming the value and the limit.

Every decode runs as one jitted function (model call, verification,
acceptance and cache bookkeeping inside one `lax.while_loop`), compiled once
per model structure and options and shared by every Decoder of a model of
that structure. Pass a `mesh` to shard the batch over its `batch_axis`,
and `param_rules` to split the parameters and the cache over it too
(`infra/sharding.py`: 'tensor' splits attention heads, hidden units and
the vocabulary over a 'model' axis); the loop stays one program, XLA
inserting the collectives it needs.

    mesh = sharding.make_mesh((2, 4), ('data', 'model'))
    decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor')
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bpd_jax import decoding
from bpd_jax import rescorers
from bpd_jax.infra import numeric
from bpd_jax.infra import sharding
from bpd_jax.models import attention
from bpd_jax.models import drafters
from bpd_jax.models.transformer import Transformer


class Decoder:
  """Greedy and blockwise decoding with one model's weights.

  The model is taken apart once: the compiled program closes over its
  structure, and a call passes only the flat list of weight arrays
  (flattening an NNX object graph and hashing its structure on every call
  is a fixed cost that weighs most at batch 1, where a short sentence's
  whole decode is not much more). A Decoder holds the weights as they were
  when it was made: after changing the model (more training), make a new
  one. `greedy` and `blockwise`, the module functions, make one for a
  single call.
  """

  def __init__(self, model: Transformer, mesh=None,
               batch_axis: str = 'data', param_rules=(), log=print,
               draft_vocab=None, ngram=None):
    """Takes the model apart (and places it on `mesh`, if given).

    Args:
      model: the Transformer.
      mesh: optional `jax.sharding.Mesh` to shard each batch over.
      batch_axis: the mesh axis the batch is split along.
      param_rules: how the parameters and the decoding cache are split
        over `mesh` (`sharding.param_shardings`, `mesh.param_rules` of a
        config): 'tensor', 'fsdp' or (regex, spec) pairs; () replicates
        the parameters and splits the cache by batch only.
      log: where a rule set's line of what it could not split goes.
      draft_vocab: distinct token ids the proposals are chosen from (a
        drafting vocabulary: `draft_vocab.most_frequent`, as FR-Spec's
        frequent tokens), making each proposal's logits cost n columns of
        the vocabulary projection instead of all of them; None: the whole
        vocabulary. Verification reads every id, so the output is the same
        (greedy's, under exact verification; the base model's
        distribution, sampling): only acceptance can change.
      ngram: the n-gram model (`rescorers.ngram.NgramModel`) that drafter
        'ngram' reads (`decoding.Lookup`); None: none.
    """
    if mesh is None:
      if param_rules:
        raise ValueError(f'param_rules={param_rules!r} needs a mesh.')
    elif batch_axis not in mesh.shape:
      raise ValueError(f'batch_axis={batch_axis!r} is not an axis of the '
                       f'mesh {dict(mesh.shape)}.')
    self.config = model.config
    self.mesh, self.batch_axis = mesh, batch_axis
    self._placement = None
    if mesh is not None:
      self._placement = _Placement(
          mesh, batch_axis, _hashable_rules(param_rules),
          drafters.tensor_rules(model.config.head_layer))
      model = self._placement.place(model, log)
    self.model = model
    self.draft_vocab = _checked_draft_vocab(draft_vocab, model.config)
    self.ngram = _checked_ngram(ngram, model.config)
    graphdef, weights = nnx.split(self.model)
    self._weights, treedef = jax.tree_util.tree_flatten(weights)
    self._decode = _structure_decoder(graphdef, treedef)
    self._layouts = {}  # Block size -> DecodingWeights, made on first use.

  def compilations(self) -> int:
    """Programs compiled for this model structure (to see recompiles)."""
    return self._decode._cache_size()  # pylint: disable=protected-access

  def decode(self, inputs, options: decoding.DecodeOptions,
             *, rescorer=None, iterations=None,
             key: int | jax.Array = 0) -> decoding.DecodeResult:
    """Decodes a batch as `options` say: the one path of every decode.

    Args:
      inputs: [batch, length] source (encoder-decoder) or prompt
        (decoder-only) token ids, right-padded with pad_id.
      options: the decode (k = 1: greedy decoding).
      rescorer: the model of the refinement's rescorer: an
        `rescorers.ngram.NgramModel` ('ngram') or a decoder-only
        Transformer on the same vocabulary ('neural'); None otherwise.
      iterations: run the loop exactly this many times, finished or not
        (timing one iteration, `timing.loop_iteration_seconds`); None:
        until every example has ended.
      key: the randomness of a sampled decode (`options.sampler`): an int
        seed or a `jax.random.key`, split into one key per example, or
        [batch] keys (an example samples as it would alone with its key).
        Unused without sampling.

    Returns:
      DecodeResult: tokens [batch, max_len] and per-example statistics;
      block_sizes has k + 1 columns.
    """
    arguments, named = self._arguments(inputs, options, rescorer,
                                       iterations, key)
    return self._decode(*arguments, **named)

  def lower(self, inputs, options: decoding.DecodeOptions, *,
            rescorer=None, key: int | jax.Array = 0):
    """The decode's program lowered for these inputs (`jax.stages.Lowered`):
    what `decode` runs with the same arguments, for XLA's cost and memory
    analyses."""
    arguments, named = self._arguments(inputs, options, rescorer, None, key)
    return self._decode.lower(*arguments, **named)

  def _arguments(self, inputs, options, rescorer, iterations, key):
    """(positional, named) arguments of the compiled program for a decode:
    the one list `decode` runs and `lower` lowers (an argument passed one
    way here and another there would compile a second program)."""
    if not isinstance(options, decoding.DecodeOptions):
      raise ValueError(f'options={options!r} is not a '
                       f"decoding.DecodeOptions (k='auto': "
                       f'auto_k.AutoDecoder).')
    inputs = self._checked(inputs, options)
    bound = structure = None
    if options.refinement is not None:
      refinement, bound, structure = rescorers.bind(
          options.refinement, rescorer, vocab_size=self.config.vocab_size,
          start_id=self.config.bos_id)
      options = dataclasses.replace(options, refinement=refinement)
    elif rescorer is not None:
      raise ValueError('a rescorer was given without a refinement.')
    sampler, keys = self._sampling(options, inputs, key)
    # A drafter needing no training, drafting alone, reads no heads.
    layout = self.layout(options.k if options.uses_heads else 1)
    return ((self._weights, layout, inputs),
            dict(options=options.static(), rescorer_structure=structure,
                 rescorer=bound, iterations=_iteration_count(iterations),
                 sampler=sampler, keys=keys, placement=self._placement,
                 ngram=self._ngram(options)))

  def _ngram(self, options):
    """The n-gram model an 'ngram' drafter reads; None for the others."""
    if options.lookup is None or options.lookup.source != 'ngram':
      return None
    if self.ngram is None:
      raise ValueError("drafter 'ngram' needs an n-gram model: "
                       'Decoder(model, ngram=...) (a '
                       'rescorers.ngram.NgramModel, e.g. the drafts job\'s '
                       'ngram.npz).')
    options.lookup.check_order(self.ngram.order)
    return self.ngram

  def sample(self, inputs, *, max_len: int, sampler: decoding.Sampler,
             key: int | jax.Array = 0) -> decoding.DecodeResult:
    """Ancestral sampling: each token drawn from the warped base model (the
    reference of blockwise sampling; temperature 0 is greedy decoding).

    Args:
      inputs: as `greedy`.
      max_len: most tokens to generate per example.
      sampler: temperature, top-k, top-p.
      key: int seed, one key, or [batch] keys (see `decode`).
    """
    return self.decode(inputs, decoding.DecodeOptions(
        max_len=max_len, sampler=sampler), key=key)

  def _sampling(self, options, inputs, key):
    """(sampler, [batch] keys on the mesh) of a sampled decode, else
    (None, None)."""
    if not options.sampling:
      return None, None
    keys = decoding.sampling.example_keys(key, inputs.shape[0])
    if self.mesh is not None:
      keys = jax.device_put(keys, jax.sharding.NamedSharding(
          self.mesh, jax.sharding.PartitionSpec(self.batch_axis)))
    sampler = options.sampler
    # Traced numbers: one program for every temperature and cut-off.
    return decoding.Sampler(float(sampler.temperature), int(sampler.top_k),
                            float(sampler.top_p), sampler.proposals), keys

  def greedy(self, inputs, *, max_len: int) -> decoding.DecodeResult:
    """Greedy decoding (the reference output of exact blockwise decoding).

    Args:
      inputs: [batch, length] source (encoder-decoder) or prompt
        (decoder-only) token ids, right-padded with pad_id.
      max_len: most tokens to generate per example.

    Returns:
      DecodeResult: tokens [batch, max_len] and per-example statistics.
    """
    return self.decode(inputs, decoding.DecodeOptions(max_len=max_len))

  def blockwise(self, inputs, *, k: int, max_len: int,
                criterion: decoding.Criterion = decoding.Exact(),
                min_block: int = 1,
                refinement: decoding.Refinement | None = None,
                rescorer=None, sampler: decoding.Sampler | None = None,
                key: int | jax.Array = 0,
                tree: decoding.Tree | None = None,
                drafter: 'str | decoding.Lookup' = 'heads'
                ) -> decoding.DecodeResult:
    """Blockwise parallel decoding: `decode` with the
    `decoding.DecodeOptions` these keywords make.

    Args:
      inputs: [batch, length] source (encoder-decoder) or prompt
        (decoder-only) token ids, right-padded with pad_id.
      k: block size, 1 <= k <= the model's num_proposal_heads (1: greedy
        decoding); any k >= 2 for a drafter needing no training that
        drafts alone. k='auto' is `auto_k.AutoDecoder(decoder, tuning)`.
      max_len: most tokens to generate per example.
      criterion: Exact() (output identical to greedy), TopK(t) or
        Distance(eps).
      min_block: l, the fewest tokens appended per call, 1 <= l <= k.
      refinement: draft refinement (Kim et al. 2024): p drafts from the
        heads' top-t lattice verified per call; None: plain drafts.
      rescorer: the refinement's language model (see `decode`).
      sampler: blockwise sampling (`decoding.Sampler`): proposals drawn from
        the warped heads and verified by the rejection rule (criterion
        Exact: the base model's distribution) or typical acceptance
        (decoding.Typical); None: argmax decoding.
      key: the sampling's int seed, key or [batch] keys (see `decode`).
      tree: a tree of the heads' candidates (`decoding.Tree`, depth k - 1)
        verified in each call; None: the heads' argmax, one draft.
      drafter: what proposes: 'heads' (the model's proposal heads), or a
        drafter that needs no training (`decoding.Lookup`, or its spec):
        'lookup' (prompt lookup: what followed the last n tokens' latest
        earlier occurrence in the prompt and output), 'ngram' (an n-gram
        model's greedy continuation), with options such as
        'lookup:max=4,min=2', and heads='fallback' or 'tree' to draft
        beside the heads ('ngram' reads the Decoder's n-gram model).

    Returns:
      DecodeResult: tokens [batch, max_len] and per-example statistics; its
      block_sizes has k + 1 columns.
    """
    if k == 'auto':
      raise ValueError("k='auto' times decodes on this machine: decode "
                       "with auto_k.AutoDecoder(decoder, tuning).decode("
                       "inputs, max_len=...) (tuning: auto_k.tune_k).")
    return self.decode(inputs, decoding.DecodeOptions(
        max_len=max_len, k=k, criterion=criterion, min_block=min_block,
        refinement=refinement, sampler=sampler, tree=tree,
        lookup=decoding.lookup.parse(drafter)), rescorer=rescorer, key=key)

  def layout(self, k: int):
    """The output weights of k heads laid out for decoding, once.

    Inside a decode they would be laid out again on every call (the
    vocabulary table transposed, the heads' weights sliced), a fixed cost
    that weighs most at batch 1.
    """
    if k not in self._layouts:
      layout = _output_layout(self.model, k, self.draft_vocab)
      if self._placement is not None:
        layout = self._placement.place_layout(layout)
      if self._layouts:  # One vocabulary table (and its drafts' columns)
        first = next(iter(self._layouts.values()))  # serves every k.
        layout = dataclasses.replace(layout, vocab=first.vocab,
                                     draft_ids=first.draft_ids,
                                     draft_vocab=first.draft_vocab)
      self._layouts[k] = layout
    return self._layouts[k]

  def _checked(self, inputs, options: decoding.DecodeOptions):
    """The inputs checked against the options and placed on the mesh."""
    options.check(self.config.num_proposal_heads, self.config.vocab_size,
                  drafters.dependent(self.config.head_layer))
    if options.scored > options.k and self.config.local_window:
      raise ValueError('several drafts a call (a tree or a refinement of '
                       'p > 1) are verified as a token tree, which local '
                       'attention (image models) does not serve.')
    return self._place(check_inputs(self.config, inputs, options))

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
  return Decoder(model, mesh, batch_axis).greedy(inputs, max_len=max_len)


def blockwise(model: Transformer, inputs, *, k: int, max_len: int,
              criterion: decoding.Criterion = decoding.Exact(),
              min_block: int = 1, mesh=None, batch_axis: str = 'data',
              refinement: decoding.Refinement | None = None,
              rescorer=None, sampler: decoding.Sampler | None = None,
              key: int | jax.Array = 0,
              tree: decoding.Tree | None = None,
              draft_vocab=None,
              drafter: 'str | decoding.Lookup' = 'heads',
              ngram=None) -> decoding.DecodeResult:
  """Blockwise decoding; see `Decoder.blockwise` for the arguments.

  Args:
    model: the Transformer; it must have at least k proposal heads.
    inputs, k, max_len, criterion, min_block, refinement, rescorer,
      sampler, key, tree, drafter: as `Decoder.blockwise`.
    mesh: optional `jax.sharding.Mesh` to shard the batch over.
    batch_axis: the mesh axis the batch is split along.
    draft_vocab: the ids proposals are chosen from (see `Decoder`).
    ngram: the n-gram model drafter 'ngram' reads (see `Decoder`).
  """
  return Decoder(model, mesh, batch_axis, draft_vocab=draft_vocab,
                 ngram=ngram).blockwise(
      inputs, k=k, max_len=max_len, criterion=criterion,
      min_block=min_block, refinement=refinement,
      rescorer=rescorer, sampler=sampler, key=key, tree=tree,
      drafter=drafter)


def sample(model: Transformer, inputs, *, max_len: int,
           sampler: decoding.Sampler, key: int | jax.Array = 0, mesh=None,
           batch_axis: str = 'data') -> decoding.DecodeResult:
  """Ancestral sampling; see `Decoder.sample` (blockwise sampling:
  `blockwise(..., sampler=)`)."""
  return Decoder(model, mesh, batch_axis).sample(
      inputs, max_len=max_len, sampler=sampler, key=key)


def check_inputs(config, inputs,
                 options: decoding.DecodeOptions) -> np.ndarray:
  """Validates decoder inputs; returns them as an int32 numpy array.

  Raises:
    ValueError: naming the offending value and its limit.
  """
  array = np.asarray(inputs)
  if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
    raise ValueError(f'inputs must be [batch, length] with batch, length >= '
                     f'1; got shape {array.shape}.')
  if not np.issubdtype(array.dtype, np.integer):
    raise ValueError(f'inputs must be integer token ids; got {array.dtype}.')
  bad = (((array < 0) & (array != config.pad_id))
         | (array >= config.vocab_size))
  if bad.any():
    i, j = np.argwhere(bad)[0]
    raise ValueError(f'token id {array[i, j]} at inputs[{i}, {j}] is outside '
                     f'the vocabulary [0, {config.vocab_size}) (padding: '
                     f'pad_id={config.pad_id}).')
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
    prompt_length = 1
  else:
    prompt_length = array.shape[1]
  needed = options.required_positions(prompt_length)
  if needed > config.max_target_len:
    raise ValueError(
        f'decoding {options.max_len} tokens (k={options.k}) after a '
        f'prompt of {prompt_length} needs {needed} decoder positions; the '
        f'model has max_target_len={config.max_target_len}. Lower max_len '
        f'or raise max_target_len.')
  return array.astype(np.int32)


@dataclasses.dataclass(frozen=True)
class _Placement:
  """Where a Decoder's arrays live: a static argument of its program.

  Attributes:
    mesh: the mesh.
    batch_axis: the mesh axis the batch is split along.
    rules: the parameters' and the cache's rules (hashable).
    drafter_rules: the model's drafter's own 'tensor' rules
      (`drafters.tensor_rules`).
  """
  mesh: jax.sharding.Mesh
  batch_axis: str
  rules: str | tuple
  drafter_rules: tuple = ()

  def place(self, model: Transformer, log) -> Transformer:
    """The model with its parameters laid out by the rules; the line of
    what the rules could not split (parameters, then cache) logged."""
    lines = []
    shardings = sharding.param_shardings(nnx.state(model), self.mesh,
                                         self.rules, lines.append,
                                         self.drafter_rules)
    # The cache's layout for an abstract batch of one row per data device.
    rows = self.mesh.shape[self.batch_axis]
    source = (jnp.zeros((rows, 1), jnp.int32)
              if model.config.is_encoder_decoder else None)
    cache = jax.eval_shape(lambda: model.init_cache(rows, 1, source))
    sharding.cache_shardings(cache, self.mesh, self.rules, self.batch_axis,
                             lines.append, self.drafter_rules)
    if self.rules == 'tensor':  # The same parameters, heads grouped.
      model = _group_heads(model, self.mesh.shape[sharding.TENSOR_AXIS],
                           lines.append)
    if lines:
      log(' '.join(lines))
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.device_put(state, shardings))

  def place_layout(self, layout):
    """A model's `DecodingWeights` laid out by the rules (by their own
    paths: 'vocab', 'proposals/w_in', ...), as the parameters they are
    made of."""
    return jax.device_put(layout, sharding.param_shardings(
        layout, self.mesh, self.rules, log=lambda _: None,
        model_rules=self.drafter_rules))

  def constrain_cache(self, cache):
    """The cache laid out by the rules (inside the decode's program)."""
    return jax.lax.with_sharding_constraint(cache, sharding.cache_shardings(
        cache, self.mesh, self.rules, self.batch_axis, log=lambda _: None,
        model_rules=self.drafter_rules))


def _group_heads(model: Transformer, devices: int, log) -> Transformer:
  """A copy of `model` whose self-attention layers lay their fused
  query/key/value columns out one group of heads per device
  (`SelfAttention.group_heads`), so that the 'tensor' rules' column split
  gives each device whole heads; `model` itself is left as it is. A layer
  whose key/value heads the devices do not divide keeps its layout (its
  split columns are exchanged between devices at every call), said in one
  log line."""
  if devices == 1:
    return model
  model = nnx.clone(model)
  ungrouped = set()
  for _, module in nnx.iter_modules(model):
    if isinstance(module, attention.SelfAttention):
      if module.num_kv_heads % devices:
        ungrouped.add(module.num_kv_heads)
      else:
        module.group_heads(devices)
  if ungrouped:
    log(f'Attention with {"/".join(map(str, sorted(ungrouped)))} key/value '
        f'heads does not split by head over the {devices} devices of '
        f'{sharding.TENSOR_AXIS!r}: its query/key/value columns are '
        f'exchanged between them.')
  return model


def _hashable_rules(rules):
  """'tensor', 'fsdp' or a tuple of (regex, spec tuple) pairs."""
  if isinstance(rules, str) or not rules:
    return rules or ()
  return tuple((pattern, tuple(spec)) for pattern, spec in rules)


def _decode_body(model: Transformer, weights, inputs,
                 options: decoding.DecodeOptions, rescore, iterations,
                 sampler=None, keys=None, placement=None, ngram=None):
  """The whole decode of a batch: encoder, prompt pass, decoding loop.

  `weights` are the model's `decoding_weights(options.k)`; `rescore`
  the refinement's rescoring function (None without one); `sampler` and
  `keys` [batch] those of a sampled decode (options.sampling);
  `placement` the mesh's (None: no mesh); `ngram` the n-gram model of
  an 'ngram' drafter (None: none).
  """
  config = model.config
  batch = inputs.shape[0]
  if config.is_encoder_decoder:
    source = inputs
    prompt = jnp.full((batch, 1), config.bos_id, jnp.int32)
  else:
    source, prompt = None, inputs
  prompt_lengths = _unpadded_lengths(prompt, config.pad_id)
  k = options.k
  cache = model.init_cache(batch, options.cache_positions(prompt.shape[1]),
                           source)
  if placement is not None:
    cache = placement.constrain_cache(cache)
  proposals = dict(proposal_logits=functools.partial(
      model.proposal_logits, k=k, weights=weights))
  if drafters.dependent(config.head_layer):  # Drafts head after head.
    proposals = dict(
        draft=functools.partial(model.draft, k=k, weights=weights),
        draft_tree=functools.partial(model.draft_tree, k=k,
                                     weights=weights))
  fns = decoding.DecodingFns(
      extend=model.extend,
      next_token_logits=functools.partial(model.next_token_logits,
                                          weights=weights),
      extend_tree=model.extend_tree, commit=model.commit, **proposals)
  ids = dict(end_ids=(config.eos_id, *config.stop_ids),
             pad_id=config.pad_id, iterations=iterations,
             ngram=None if ngram is None else decoding.lookup.NgramDrafter(
                 functools.partial(rescorers.ngram.next_token, ngram),
                 ngram.order - 1, config.bos_id))
  ids['searched'] = _searched(config, source, prompt, prompt_lengths,
                              options.lookup)
  if options.sampling:
    return decoding.sampling.blockwise_sample_decode(
        fns, cache, prompt, prompt_lengths, options, sampler, keys, **ids)
  return decoding.blockwise_decode(fns, cache, prompt, prompt_lengths,
                                   options, rescore=rescore, **ids)


def _unpadded_lengths(rows: jax.Array, pad_id: int) -> jax.Array:
  """[batch] int32: the tokens of each right-padded row [batch, L]."""
  return (rows != pad_id).sum(axis=1).astype(jnp.int32)


def _searched(config, source, prompt, prompt_lengths, lookup):
  """(tokens [batch, S + P], lengths [batch]) a prompt-lookup drafter
  searches before the output: an encoder-decoder's source, then its
  prompt (bos), or None, the prompt alone (a decoder-only model's, whose
  prompt is its context; an 'ngram' drafter's, whose model reads the
  target side from bos).

  One vocabulary holds both sides, so what a translation copies (names,
  numbers) or a summary quotes is found in its source.
  """
  if source is None or lookup is None or lookup.source != 'lookup':
    return None
  source_lengths = _unpadded_lengths(source, config.pad_id)
  return (decoding.lookup.history(source, source_lengths, prompt,
                                  prompt_lengths),
          source_lengths + prompt_lengths)


def _iteration_count(iterations) -> np.ndarray:
  """The loop's traced iteration count: -1 (until done) for None, so that
  a decode and the timing of its loop (`timing.loop_iteration_seconds`) run
  one compiled program."""
  if iterations is not None and not (numeric.is_integer(iterations)
                                     and 0 <= iterations < 2**31):
    raise ValueError(f'iterations={iterations!r} must be None (until every '
                     f'example has ended) or an integer in [0, 2**31).')
  return np.int32(-1 if iterations is None else iterations)


@functools.lru_cache(maxsize=32)
def _structure_decoder(graphdef, treedef):
  """The jitted decoder of one model structure, taking its flat weights.

  Shared by Decoders of models with the same structure (the module
  functions' one-off Decoders, a periodic evaluation during training), so
  they reuse each other's compilations.
  """
  def decode(weights, layout, inputs, options, rescorer_structure=None,
             rescorer=None, iterations=None, sampler=None, keys=None,
             placement=None, ngram=None):
    model = nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef,
                                                             weights))
    rescore = rescorers.function(options.refinement, rescorer_structure,
                                 rescorer)
    return _decode_body(model, layout, inputs, options, rescore, iterations,
                        sampler, keys, placement, ngram)
  return jax.jit(decode, static_argnames=('options', 'rescorer_structure',
                                          'placement'))


@functools.partial(jax.jit, static_argnames=('k',))
def _output_layout(model: Transformer, k: int, draft_ids=None):
  return model.decoding_weights(k, draft_ids)


def _checked_draft_vocab(draft_vocab, config) -> np.ndarray | None:
  """[n] int32 distinct ids of a drafting vocabulary (None: none), or a
  ValueError naming what is wrong with it."""
  if draft_vocab is None:
    return None
  ids = np.asarray(draft_vocab)
  if ids.ndim != 1 or not ids.size or not (
      np.issubdtype(ids.dtype, np.integer)):
    raise ValueError(f'draft_vocab must be a non-empty 1-D list of token '
                     f'ids; got shape {ids.shape} of {ids.dtype}.')
  if ids.min() < 0 or ids.max() >= config.vocab_size:
    raise ValueError(f'draft_vocab holds ids outside [0, {config.vocab_size})'
                     f' (the vocabulary): {ids.min()} .. {ids.max()}.')
  if len(np.unique(ids)) != len(ids):
    raise ValueError('draft_vocab holds an id twice.')
  return ids.astype(np.int32)


def _checked_ngram(ngram, config):
  """The n-gram model of drafter 'ngram' (None: none), or a ValueError
  naming what does not fit the model."""
  if ngram is None:
    return None
  if not isinstance(ngram, rescorers.ngram.NgramModel):
    raise ValueError(f'ngram={type(ngram).__name__} is not a '
                     f'rescorers.ngram.NgramModel (the drafts job\'s '
                     f'ngram.npz, or rescorers.ngram.build).')
  if ngram.vocab_size != config.vocab_size:
    raise ValueError(f'the n-gram model has a vocabulary of '
                     f'{ngram.vocab_size}, the decoded model '
                     f'{config.vocab_size}.')
  return ngram
