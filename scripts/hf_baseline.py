"""External baseline: our greedy decoder against Hugging Face `generate`.

    pip install -r requirements.txt -r requirements-bench.txt
    python scripts/hf_baseline.py --output_dir=/tmp/hf_baseline

A script beside the package, not part of it: torch and transformers
(requirements-bench.txt) are needed here only, and neither the library,
its jobs nor CI installs them. It imports bpd_jax as installed by
requirements.txt.

Both sides decode the same random source with an encoder-decoder Transformer
of identical dimensions and random weights, on the CPU: ours is
`bpd_jax.generate.Decoder.greedy` (JAX), theirs a `MarianMTModel` (PyTorch) decoded
by `generate` greedily with its KV cache, in each cache setting measured:
the default dynamic cache, `cache_implementation='static'`, and the static
cache with `torch.compile` (generate's automatic compilation, which it only
enables on the CPU when asked to). Every run generates exactly `new_tokens`
tokens per example on both sides (HF: min_new_tokens = max_new_tokens; ours:
the eos logit is pinned at 0 below the positive maximum, see `ours_model`),
and tokens are counted as batch x new_tokens on both sides.

The systems run interleaved in one process after a warm-up call each (its
time, compilation included, is reported as compile_s); wall_s is the median
of the timed calls. The ratio on our row is our tokens/s over the fastest HF
option's; on an HF row, ours over that row's. The project's targets: ratio
>= 1.5 at batch 1 and >= 1.0 at larger batches.

Architectural differences that do not change the amount of work: Marian
normalises after each residual (ours before, plus one final LayerNorm per
stack) and adds a final logits bias.
"""

import dataclasses
import importlib
import os
import statistics
import sys
import time

from absl import app
from absl import flags
import jax
import numpy as np
import tabulate
from flax import nnx

from bpd_jax import generate
from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors
from bpd_jax.models import Transformer, TransformerConfig

OURS = 'bpd_jax greedy'
HF_DYNAMIC = 'hf generate dynamic'
HF_STATIC = 'hf generate static'
HF_COMPILED = 'hf generate static+compile'
COLUMNS = ('system', 'size', 'batch', 'new_tokens', 'compile_s', 'wall_s',
           'tokens_per_s', 'ms_per_step', 'ratio', 'target', 'fastest_hf')
VOCAB_SIZES = {'tiny': 100, 'small': 8000, 'base': 32000}
SOURCE_LEN = 24
INSTALL_HINT = ('the HF baseline needs torch and transformers: '
                'pip install -r requirements-bench.txt')


@dataclasses.dataclass(frozen=True)
class _System:
  """One decoder under test: `decode()` runs one whole batch to the end."""
  name: str
  decode: object  # () -> None, blocking until the tokens exist.


def target_ratio(batch: int) -> float:
  """The project's target: ours / fastest HF tokens/s at this batch size."""
  return 1.5 if batch == 1 else 1.0


def ours_config(size: str, new_tokens: int) -> TransformerConfig:
  """Our model of a named size, base model only (greedy needs no heads)."""
  return TransformerConfig.from_size(
      size, vocab_size=VOCAB_SIZES[size], num_proposal_heads=1,
      dropout_rate=0.0, max_target_len=new_tokens + 1,
      max_source_len=SOURCE_LEN)


def marian_kwargs(config: TransformerConfig) -> dict:
  """`MarianConfig` arguments of the same dimensions as `config`.

  Marian is the encoder-decoder of HF with sinusoidal positions, a scaled,
  optionally shared and tied embedding and a configurable activation, so
  every dimension and option of ours has a field to match.
  """
  if not config.is_encoder_decoder:
    raise ValueError('the HF baseline compares encoder-decoder models; got '
                     'num_encoder_layers=0.')
  return dict(
      vocab_size=config.vocab_size, decoder_vocab_size=config.vocab_size,
      d_model=config.d_model,
      encoder_layers=config.num_encoder_layers,
      decoder_layers=config.num_decoder_layers,
      encoder_attention_heads=config.num_heads,
      decoder_attention_heads=config.num_heads,
      encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
      activation_function='relu', scale_embedding=True,
      share_encoder_decoder_embeddings=config.share_embeddings,
      tie_word_embeddings=config.tie_output,
      max_position_embeddings=max(config.max_source_len,
                                  config.max_target_len),
      dropout=config.dropout_rate, attention_dropout=0.0,
      activation_dropout=0.0,
      pad_token_id=config.pad_id, eos_token_id=config.eos_id,
      decoder_start_token_id=config.bos_id, bos_token_id=None,
      # Marian's default forces eos at max_length, which would cut the
      # output short of new_tokens.
      forced_eos_token_id=None, use_cache=True)


def ours_model(config: TransformerConfig, seed: int = 0) -> Transformer:
  """Our random model, made never to emit eos.

  The eos row of the tied output embedding is zeroed, so the eos logit is
  exactly 0, while the final LayerNorm's unit-variance output against the
  other random rows gives logits of ~N(0, 1): their maximum is positive
  (all V - 1 negative has probability 2^-(V - 1)). `greedy_lengths_ok`
  checks the outcome on every run.
  """
  if not config.tie_output:
    raise ValueError('eos suppression zeroes the tied output embedding; '
                     'needs tie_output=True.')
  model = Transformer(config, rngs=nnx.Rngs(seed))
  table = model.target_embed.embedding
  table[...] = table[...].at[config.eos_id].set(0.0)
  return model


def random_source(config: TransformerConfig, batch: int,
                  seed: int = 0) -> np.ndarray:
  """[batch, SOURCE_LEN] int32 ids, none of them pad, eos or bos."""
  rng = np.random.default_rng(seed)
  low = max(config.pad_id, config.eos_id, config.bos_id) + 1
  return rng.integers(low, config.vocab_size,
                      (batch, min(SOURCE_LEN, config.max_source_len)),
                      dtype=np.int32)


def check_ours(result, new_tokens: int, eos_id: int):
  """Raises unless every example generated exactly new_tokens, no eos.

  Args:
    result: DecodeResult of `generate.greedy`: tokens [batch, new_tokens],
      lengths [batch].
  """
  lengths = np.asarray(result.lengths)
  tokens = np.asarray(result.tokens)
  if (lengths != new_tokens).any() or (tokens == eos_id).any():
    raise RuntimeError(
        f'our greedy decoder did not generate exactly {new_tokens} tokens '
        f'per example (lengths {lengths.tolist()}): the eos suppression '
        f'failed and the token counts would not be comparable.')


def _hf_systems(config: TransformerConfig, source: np.ndarray,
                new_tokens: int, compile_hf: bool) -> list[_System]:
  """HF generate on a Marian twin of `config`, one system per cache option."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  torch.manual_seed(0)
  model = transformers.MarianMTModel(
      transformers.MarianConfig(**marian_kwargs(config))).eval()
  input_ids = torch.from_numpy(source.astype(np.int64))
  attention_mask = torch.ones_like(input_ids)

  def generation_config(cache, compiled=False):
    options = {}
    if compiled:
      # generate compiles the decoder step only on accelerators unless the
      # compile config opts in for every device. 'default' mode: the
      # 'reduce-overhead' default relies on CUDA graphs.
      compile_config = transformers.CompileConfig(mode='default')
      compile_config._compile_all_devices = True  # No public switch.
      options['compile_config'] = compile_config
    return transformers.GenerationConfig(
        do_sample=False, num_beams=1, use_cache=True,
        cache_implementation=cache, max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, decoder_start_token_id=config.bos_id,
        eos_token_id=config.eos_id, pad_token_id=config.pad_id,
        forced_eos_token_id=None, **options)

  def system(name, generation):
    def decode():
      with torch.inference_mode():
        out = model.generate(input_ids=input_ids,
                             attention_mask=attention_mask,
                             generation_config=generation)
      # [batch, 1 + new_tokens]: the decoder start token, then the output.
      if tuple(out.shape) != (source.shape[0], new_tokens + 1):
        raise RuntimeError(f'{name} returned shape {tuple(out.shape)}, not '
                           f'{(source.shape[0], new_tokens + 1)}.')
    return _System(name, decode)

  systems = [system(HF_DYNAMIC, generation_config(None)),
             system(HF_STATIC, generation_config('static'))]
  if compile_hf:
    systems.append(system(HF_COMPILED, generation_config('static', True)))
  return systems


def _ours_system(config: TransformerConfig, source: np.ndarray,
                 new_tokens: int) -> _System:
  cpu = jax.devices('cpu')[0]
  with jax.default_device(cpu):
    decoder = generate.Decoder(ours_model(config))

  def decode():
    with jax.default_device(cpu):
      result = decoder.greedy(source, max_len=new_tokens)
      jax.block_until_ready(result)
    check_ours(result, new_tokens, config.eos_id)
  return _System(OURS, decode)


def _timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def measure(size: str, batch: int, new_tokens: int, repeats: int,
            compile_hf: bool = True, progress=print) -> list[dict]:
  """Rows of every system for one model size and batch size (see COLUMNS)."""
  import torch  # pylint: disable=g-import-not-at-top
  # Each group compiles afresh (its compile_s is honest) and cannot hit
  # dynamo's recompilation limit, past which it would silently run eagerly.
  torch._dynamo.reset()  # pylint: disable=protected-access
  config = ours_config(size, new_tokens)
  source = random_source(config, batch)
  with jax.default_device(jax.devices('cpu')[0]):
    systems = [_ours_system(config, source, new_tokens)]
  systems += _hf_systems(config, source, new_tokens, compile_hf)
  compile_s = {}
  for system in systems:
    compile_s[system.name] = _timed(system.decode)
    progress(f'{size} batch {batch}: {system.name} warm-up '
             f'{compile_s[system.name]:.2f} s')
  walls = {system.name: [] for system in systems}
  for repeat in range(repeats):
    # Ours between each HF option, and the order rotated every repeat, so
    # that load from elsewhere on the machine falls on every system alike.
    order = systems[1:][repeat % (len(systems) - 1):] + systems[1:][
        :repeat % (len(systems) - 1)]
    for system in [x for hf in order for x in (systems[0], hf)]:
      walls[system.name].append(_timed(system.decode))
  rows = []
  for system in systems:
    wall = statistics.median(walls[system.name])
    rows.append(dict(system=system.name, size=size, batch=batch,
                     new_tokens=new_tokens, compile_s=compile_s[system.name],
                     wall_s=wall, tokens_per_s=batch * new_tokens / wall,
                     ms_per_step=1000.0 * wall / new_tokens))
    progress(f'{size} batch {batch}: {system.name} median {wall:.3f} s')
  return add_ratios(rows)


def add_ratios(rows: list[dict]) -> list[dict]:
  """Adds ratio, target and fastest_hf to the rows of one size and batch.

  Args:
    rows: one row per system with 'system', 'batch' and 'tokens_per_s'; the
      row of OURS and at least one HF row.

  Returns:
    New rows: ours' ratio is our tokens/s over the fastest HF option's (and
    carries the target); an HF row's ratio is ours over that row's.
  """
  ours = next(row for row in rows if row['system'] == OURS)
  hf_rows = [row for row in rows if row['system'] != OURS]
  fastest = max(hf_rows, key=lambda row: row['tokens_per_s'])
  out = []
  for row in rows:
    row = dict(row, fastest_hf=row is fastest)
    if row['system'] == OURS:
      row.update(ratio=ours['tokens_per_s'] / fastest['tokens_per_s'],
                 target=target_ratio(row['batch']))
    else:
      row.update(ratio=ours['tokens_per_s'] / row['tokens_per_s'],
                 target=None)
    out.append(row)
  return out


def require_bench_packages():
  """Imports torch and transformers; returns torch.

  Raises:
    ImportError: naming requirements-bench.txt when either is missing.
  """
  try:
    torch = importlib.import_module('torch')
    importlib.import_module('transformers')
  except ImportError as error:
    raise ImportError(f'{INSTALL_HINT} ({error}).') from error
  return torch


def run(sizes=('small', 'base'), batch_sizes=(1, 32), new_tokens: int = 64,
        repeats: int = 7, compile_hf: bool = True,
        progress=print) -> list[dict]:
  """Measures every size and batch size; returns the rows (see COLUMNS).

  Raises:
    ImportError: naming requirements-bench.txt when torch or transformers
      is missing.
  """
  torch = require_bench_packages()
  torch.set_num_threads(os.cpu_count())
  rows = []
  for size in sizes:
    for batch in batch_sizes:
      rows += measure(size, batch, new_tokens, repeats, compile_hf, progress)
  return rows


def to_markdown(rows: list[dict]) -> str:
  """A Markdown table of the rows; the fastest HF option is marked '*'."""
  def cell(row, column):
    value = row.get(column)
    if column == 'fastest_hf':
      return '*' if value else ''
    if value is None:
      return ''
    if column == 'ratio':
      return f'{value:.2f}x'
    if column == 'target':
      return f'>= {value:.1f}x'
    if isinstance(value, float):
      return f'{value:.4g}' if column != 'tokens_per_s' else f'{value:.1f}'
    return value
  return tabulate.tabulate([[cell(row, c) for c in COLUMNS] for row in rows],
                           headers=COLUMNS, tablefmt='github')


def environment() -> dict:
  """Versions and threads, for the JSON report."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  return dict(jax=jax.__version__, torch=torch.__version__,
              transformers=transformers.__version__,
              torch_threads=torch.get_num_threads(), cpus=os.cpu_count(),
              python=sys.version.split()[0])


def _define_flags():
  """The CLI's flags, defined only when run as a program.

  Defining them at import would clash with other jobs' flags of the same
  name (distill's --output_dir) in a process that imports both.
  """
  flags.DEFINE_string('output_dir', None,
                      'Where hf_baseline.json and hf_baseline.md go.')
  flags.DEFINE_list('sizes', ['small', 'base'], 'Model sizes.')
  flags.DEFINE_list('batch_sizes', ['1', '32'], 'Batch sizes.')
  flags.DEFINE_integer('new_tokens', 64, 'Tokens generated per example.')
  flags.DEFINE_integer('repeats', 7, 'Timed calls per system.')
  flags.DEFINE_bool('quick', False, 'Smoke run: 16 tokens, 2 repeats.')
  flags.DEFINE_bool('hf_compile', True,
                    'Also measure HF generate with torch.compile.')
  flags.mark_flags_as_required(['output_dir'])


def main(argv):
  options = flags.FLAGS
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    require_bench_packages()
  except ImportError as error:
    sys.exit(f'error: {error}')
  for size in options.sizes:
    if size not in VOCAB_SIZES:
      raise app.UsageError(f'--sizes: unknown size {size!r}; known: '
                           f'{sorted(VOCAB_SIZES)}.')
  new_tokens, repeats = options.new_tokens, options.repeats
  if options.quick:
    new_tokens, repeats = 16, 2
  rows = run(sizes=tuple(options.sizes),
             batch_sizes=tuple(int(b) for b in options.batch_sizes),
             new_tokens=new_tokens, repeats=repeats,
             compile_hf=options.hf_compile)
  table = to_markdown(rows)
  try:
    atomic_files.write_json(
        os.path.join(options.output_dir, 'hf_baseline.json'),
        dict(environment=environment(), source_len=SOURCE_LEN,
             repeats=repeats, rows=rows), indent=2)
    atomic_files.write_text(
        os.path.join(options.output_dir, 'hf_baseline.md'), table + '\n')
  except errors.WriteError as error:
    sys.exit(f'error: {error}')  # One line, as jobs.run reports it.
  print(table)


if __name__ == '__main__':
  _define_flags()
  app.run(main)
