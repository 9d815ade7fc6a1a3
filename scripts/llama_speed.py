"""Speed at real shapes: an imported Llama-family model against transformers.

    pip install -r requirements.txt -r requirements-bench.txt
    python scripts/llama_speed.py --output_dir=/tmp/llama_speed

A script beside the package, as scripts/hf_baseline.py (whose eos check
and ratios it reuses): torch and transformers are needed here only.

For each shape (SHAPES: SmolLM2-135M's and Llama-3.2-1B's, random
weights), transformers writes a random `LlamaForCausalLM` once into
--cache_dir (bfloat16, as the Hub stores them; reused when present). Then,
in each dtype, the folder is loaded both into bpd_jax, through the importer
(`bpd_jax.models.imports`, with new proposal heads), and into transformers,
and measured side by side in one process, on the CPU, at batch 1:

- logits: both models' float32 logits of one prompt; their largest
  difference against the logits' own scale.
- greedy: tokens per second of `generate.Decoder.greedy` against
  transformers' `generate` (greedy, KV cache, inference mode) with its
  default dynamic cache and with its static cache; interleaved after a
  warm-up call each (compile_s), the median of --repeats timed calls. Both
  generate exactly --new_tokens tokens after the same prompt: the
  checkpoint's eos embedding row is zero, so its tied logit is exactly 0,
  below the maximum of the other rows' random logits (hf_baseline's
  argument, checked on every call by its `check_ours`), and transformers
  runs with min_new_tokens = max_new_tokens. same_tokens: how many of
  transformers' leading tokens equal ours.
- step costs: T(k), the seconds of one decoding call that scores k
  positions with the cache (head 1 at all of them, heads 2..k at the last:
  what blockwise decoding pays per step; `bpd_jax.bench.step_costs`), for
  each of --ks, and T(k) / T(1).
- floor: the weights one step must read (the base's parameter bytes, the
  tied embedding once: the vocabulary projection reads it whole) over the
  memory bandwidth measured here (`measure_bandwidth`): no step can be
  faster. heads_mb: what heads 2..k add at the largest k.

Targets (issue #31): our greedy >= 1.5x transformers' at batch 1 for each
shape, each side in its fastest dtype; T(8) / T(1) <= 1.5 at the 1B shape
in bfloat16.
"""

import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import tabulate
from flax import nnx

import hf_baseline
from bpd_jax import generate
from bpd_jax.bench import step_costs
from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors
from bpd_jax.models import imports

# transformers' LlamaConfig fields of each shape. SmolLM2-135M and
# Llama-3.2-1B as published (their ids: SmolLM2-135M-Instruct's, which
# tell bos from eos); 'tiny' for the script's test.
SHAPES = {
    'smollm2-135m': dict(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, intermediate_size=1536,
        vocab_size=49152, tie_word_embeddings=True, rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        rope_parameters=dict(rope_type='default', rope_theta=100000.0),
        bos_token_id=1, eos_token_id=2),
    'llama-3.2-1b': dict(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, intermediate_size=8192,
        vocab_size=128256, tie_word_embeddings=True, rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_parameters=dict(rope_type='llama3', rope_theta=500000.0,
                             factor=32.0, low_freq_factor=1.0,
                             high_freq_factor=4.0,
                             original_max_position_embeddings=8192),
        bos_token_id=128000, eos_token_id=128001),
    'tiny': dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=128,
        vocab_size=512, tie_word_embeddings=True, rms_norm_eps=1e-5,
        max_position_embeddings=256,
        rope_parameters=dict(rope_type='llama3', rope_theta=500000.0,
                             factor=4.0, low_freq_factor=1.0,
                             high_freq_factor=4.0,
                             original_max_position_embeddings=16),
        bos_token_id=1, eos_token_id=2),
}
DEFAULT_SHAPES = ('smollm2-135m', 'llama-3.2-1b')
DTYPES = ('bfloat16', 'float32')
HF_DYNAMIC = 'hf generate dynamic'
HF_STATIC = 'hf generate static'
SEED = 0
# The bandwidth buffer: far larger than the caches, so that it is read
# from memory.
BANDWIDTH_BYTES = 1 << 30
GREEDY_COLUMNS = ('shape', 'dtype', 'system', 'new_tokens', 'compile_s',
                  'wall_s', 'tokens_per_s', 'ms_per_token', 'ratio',
                  'fastest_hf', 'same_tokens')
TARGET_STEP_RATIO = 1.5  # T(8) / T(1) at the 1B shape in bfloat16.


def write_checkpoint(shape: str, cache_dir: str) -> str:
  """The folder of the shape's random checkpoint, written on first use.

  A random `LlamaForCausalLM` of SHAPES[shape] (transformers' own
  initialisation, seeded), its eos embedding row zeroed (see the module
  doc), saved in bfloat16 by save_pretrained under a temporary name, then
  renamed: a folder that exists is whole.

  Raises:
    RuntimeError: the folder exists with another shape's config.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  folder = os.path.join(cache_dir, shape)
  fields = SHAPES[shape]
  if os.path.isdir(folder):
    with open(os.path.join(folder, 'config.json')) as f:
      stored = json.load(f)
    different = [name for name, value in fields.items()
                 if stored.get(name) != value]
    if different:
      raise RuntimeError(f'{folder} holds another checkpoint ({different[0]}'
                         f'={stored.get(different[0])!r}); remove it.')
    return folder
  os.makedirs(cache_dir, exist_ok=True)
  torch.manual_seed(SEED)
  model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**fields))
  with torch.no_grad():
    model.get_input_embeddings().weight[fields['eos_token_id']] = 0.0
  temp = tempfile.mkdtemp(prefix=f'.{shape}.', dir=cache_dir)
  try:
    model.to(torch.bfloat16).save_pretrained(temp)
    os.rename(temp, folder)
  except BaseException:
    shutil.rmtree(temp, ignore_errors=True)
    raise
  return folder


def load_ours(folder: str, dtype: str, heads: int, positions: int):
  """The folder through the importer: parameters and computation in
  `dtype`, `heads` proposal heads (new, independent), `positions` decoder
  positions."""
  return imports.load_model(folder, num_proposal_heads=heads,
                            head_layer='independent', dtype=dtype,
                            param_dtype=dtype, max_target_len=positions)


def load_theirs(folder: str, dtype: str):
  """The folder in transformers, in `dtype`, for inference."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.LlamaForCausalLM.from_pretrained(
      folder, dtype=getattr(torch, dtype)).eval()


def make_prompt(config, length: int, seed: int = SEED) -> np.ndarray:
  """[1, length] int32: bos, then random ids that are no special id."""
  rng = np.random.default_rng(seed)
  special = {config.bos_id, config.eos_id, config.pad_id,
             *getattr(config, 'stop_ids', ())}
  ids = [i for i in rng.integers(0, config.vocab_size, 4 * length)
         if i not in special][:length - 1]
  return np.array([[config.bos_id, *ids]], np.int32)


def compare_logits(ours, theirs, prompt: np.ndarray) -> dict:
  """Both models' logits of `prompt` [1, L], in float32.

  Returns:
    max_abs_diff: the largest |ours - theirs| over [L, vocab];
    logits_scale: the largest |theirs|; relative_diff: their ratio.
  """
  import torch  # pylint: disable=g-import-not-at-top
  mine = np.asarray(nnx.jit(lambda m, x: m.next_token_logits(m(None, x)))(
      ours, jnp.asarray(prompt)), np.float32)
  with torch.inference_mode():
    reference = theirs(torch.from_numpy(prompt.astype(np.int64))
                       ).logits.float().numpy()
  diff = float(np.abs(mine - reference).max())
  scale = float(np.abs(reference).max())
  return dict(max_abs_diff=diff, logits_scale=scale,
              relative_diff=diff / scale)


def _hf_decoders(model, prompt: np.ndarray, new_tokens: int, eos_id: int):
  """{name: () -> [new_tokens] tokens} of transformers' generate, one per
  cache setting."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  input_ids = torch.from_numpy(prompt.astype(np.int64))
  attention_mask = torch.ones_like(input_ids)

  def decoder(cache):
    generation = transformers.GenerationConfig(
        do_sample=False, num_beams=1, use_cache=True,
        cache_implementation=cache, max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, eos_token_id=eos_id,
        pad_token_id=eos_id)

    def decode():
      with torch.inference_mode():
        out = model.generate(input_ids=input_ids,
                             attention_mask=attention_mask,
                             generation_config=generation)
      if tuple(out.shape) != (1, prompt.shape[1] + new_tokens):
        raise RuntimeError(f'generate returned shape {tuple(out.shape)}; '
                           f'expected {(1, prompt.shape[1] + new_tokens)}.')
      return out[0, prompt.shape[1]:].numpy()
    return decode
  return {HF_DYNAMIC: decoder(None), HF_STATIC: decoder('static')}


def _our_decoder(model, prompt: np.ndarray, new_tokens: int):
  """() -> [new_tokens] tokens of our greedy decoder, checked to be
  exactly new_tokens with no eos."""
  decoder = generate.Decoder(model)

  def decode():
    result = jax.block_until_ready(decoder.greedy(prompt,
                                                  max_len=new_tokens))
    hf_baseline.check_ours(result, new_tokens, model.config.eos_id)
    return np.asarray(result.tokens)[0]
  return decode


def time_interleaved(decoders: dict, repeats: int, progress=print
                     ) -> tuple[dict, dict, dict]:
  """Times each decoder after a warm-up call; ours (the first) between
  each other one, their order rotated every round, as hf_baseline does.

  Returns:
    ({name: warm-up seconds}, {name: median seconds}, {name: tokens}).
  """
  names = list(decoders)
  compile_s, tokens, walls = {}, {}, {name: [] for name in names}
  for name in names:
    begin = time.perf_counter()
    tokens[name] = decoders[name]()
    compile_s[name] = time.perf_counter() - begin
    progress(f'  {name}: warm-up {compile_s[name]:.2f} s')
  others = names[1:]
  for repeat in range(repeats):
    shift = repeat % len(others)
    for other in others[shift:] + others[:shift]:
      for name in (names[0], other):
        begin = time.perf_counter()
        decoders[name]()
        walls[name].append(time.perf_counter() - begin)
  return compile_s, {name: statistics.median(walls[name])
                     for name in names}, tokens


def greedy_rows(shape: str, dtype: str, ours, theirs, prompt: np.ndarray,
                new_tokens: int, repeats: int, progress=print) -> list[dict]:
  """One row per system (see GREEDY_COLUMNS), ratios by hf_baseline's
  `add_ratios`: ours over the fastest transformers setting."""
  decoders = {hf_baseline.OURS: _our_decoder(ours, prompt, new_tokens),
              **_hf_decoders(theirs, prompt, new_tokens,
                             ours.config.eos_id)}
  compile_s, wall_s, tokens = time_interleaved(decoders, repeats, progress)
  rows = []
  for name in decoders:
    equal = tokens[name] == tokens[hf_baseline.OURS]
    rows.append(dict(
        system=name, shape=shape, dtype=dtype, batch=1,
        new_tokens=new_tokens, compile_s=compile_s[name],
        wall_s=wall_s[name], tokens_per_s=new_tokens / wall_s[name],
        ms_per_token=1000.0 * wall_s[name] / new_tokens,
        same_tokens=int(np.argmin(equal)) if not equal.all() else
        new_tokens))
    progress(f'  {name}: {rows[-1]["tokens_per_s"]:.1f} tokens/s')
  return hf_baseline.add_ratios(rows)


def parameter_bytes(model) -> tuple[int, int]:
  """(bytes of the base's parameters, bytes of one proposal head)."""
  state = nnx.state(model, nnx.Param)
  total = sum(x.nbytes for x in jax.tree.leaves(state))
  heads = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model.heads,
                                                          nnx.Param)))
  return total - heads, heads // max(model.heads.num_layer_heads, 1)


def measure_bandwidth(repeats: int = 5) -> float:
  """Bytes per second a jitted `jnp.sum` reads from a BANDWIDTH_BYTES
  float32 buffer (the fastest of `repeats`): the memory bandwidth one
  step's weight reads can reach."""
  buffer = jnp.ones(BANDWIDTH_BYTES // 4, jnp.float32)
  total = jax.jit(jnp.sum)
  jax.block_until_ready(total(buffer))
  fastest = float('inf')
  for _ in range(repeats):
    begin = time.perf_counter()
    jax.block_until_ready(total(buffer))
    fastest = min(fastest, time.perf_counter() - begin)
  return BANDWIDTH_BYTES / fastest


def step_row(shape: str, dtype: str, model, prompt_len: int,
             new_tokens: int, ks, repeats: int) -> dict:
  """T(k) of each k (`step_costs`), T(k) / T(1), and the weight floor
  at the bandwidth measured right after them (the machine's load then)."""
  seconds = step_costs.measure_all(model, ks, batch_size=1,
                                   source_len=prompt_len, max_len=new_tokens,
                                   repeats=repeats)
  bandwidth = measure_bandwidth()
  base, head = parameter_bytes(model)
  floor = base / bandwidth
  row = dict(shape=shape, dtype=dtype, t1_ms=1000.0 * seconds[1],
             weights_mb=base / 1e6, bandwidth_gb_s=bandwidth / 1e9,
             floor_ms=1000.0 * floor, t1_over_floor=seconds[1] / floor,
             heads_mb=(max(ks) - 1) * head / 1e6)
  for k in ks[1:]:
    row[f't{k}_over_t1'] = seconds[k] / seconds[1]
  return row


def measure_shape(shape: str, dtypes, cache_dir: str, prompt_len: int,
                  new_tokens: int, repeats: int, ks, step_repeats: int,
                  progress=print) -> dict:
  """Logits, greedy rows and step rows of one shape in each dtype."""
  folder = write_checkpoint(shape, cache_dir)
  positions = prompt_len + new_tokens + max(ks)
  out = dict(logits=[], greedy=[], steps=[])
  for dtype in dtypes:
    progress(f'{shape} {dtype}:')
    ours = load_ours(folder, dtype, max(ks), positions)
    theirs = load_theirs(folder, dtype)
    prompt = make_prompt(ours.config, prompt_len)
    out['logits'].append(dict(shape=shape, dtype=dtype,
                              **compare_logits(ours, theirs, prompt)))
    progress(f'  logits: {out["logits"][-1]}')
    out['greedy'] += greedy_rows(shape, dtype, ours, theirs, prompt,
                                 new_tokens, repeats, progress)
    del theirs
    gc.collect()
    out['steps'].append(step_row(shape, dtype, ours, prompt_len,
                                 new_tokens, ks, step_repeats))
    progress(f'  steps: {out["steps"][-1]}')
    del ours
    gc.collect()
    jax.clear_caches()
  return out


def targets(greedy: list[dict], steps: list[dict]) -> list[dict]:
  """The issue's targets, each with its figure and whether it is met:
  per shape, our fastest dtype's tokens/s over transformers' fastest
  (dtype and cache); T(8) / T(1) at llama-3.2-1b in bfloat16."""
  out = []
  for shape in dict.fromkeys(row['shape'] for row in greedy):
    rows = [row for row in greedy if row['shape'] == shape]
    ours = max((r for r in rows if r['system'] == hf_baseline.OURS),
               key=lambda r: r['tokens_per_s'])
    theirs = max((r for r in rows if r['system'] != hf_baseline.OURS),
                 key=lambda r: r['tokens_per_s'])
    ratio = ours['tokens_per_s'] / theirs['tokens_per_s']
    out.append(dict(
        target=f'{shape}: greedy ours / transformers >= 1.5x',
        figure=ratio, met=ratio >= 1.5,
        detail=f'ours {ours["dtype"]} {ours["tokens_per_s"]:.1f} tokens/s, '
               f'{theirs["system"]} {theirs["dtype"]} '
               f'{theirs["tokens_per_s"]:.1f} tokens/s'))
  for row in steps:
    if (row['shape'], row['dtype']) == ('llama-3.2-1b', 'bfloat16') and (
        't8_over_t1' in row):
      out.append(dict(target='llama-3.2-1b bfloat16: T(8) / T(1) <= 1.5',
                      figure=row['t8_over_t1'],
                      met=row['t8_over_t1'] <= TARGET_STEP_RATIO,
                      detail=f'T(1) {row["t1_ms"]:.1f} ms'))
  return out


def run(shapes=DEFAULT_SHAPES, dtypes=DTYPES, cache_dir: str | None = None,
        prompt_len: int = 16, new_tokens: int = 32, repeats: int = 5,
        ks=(1, 2, 4, 8), step_repeats: int = 3, progress=print) -> dict:
  """Measures every shape on the CPU; returns the report (JSON-ready).

  Raises:
    ImportError: naming requirements-bench.txt when torch or transformers
      is missing.
  """
  torch = hf_baseline.require_bench_packages()
  torch.set_num_threads(os.cpu_count())
  cache_dir = cache_dir or os.path.join(tempfile.gettempdir(),
                                        'bpd_jax_llama_speed')
  report = dict(logits=[], greedy=[], steps=[])
  with jax.default_device(jax.devices('cpu')[0]):
    for shape in shapes:
      for name, rows in measure_shape(
          shape, dtypes, cache_dir, prompt_len, new_tokens, repeats, ks,
          step_repeats, progress).items():
        report[name] += rows
  return dict(environment=environment(),
              settings=dict(prompt_len=prompt_len, new_tokens=new_tokens,
                            repeats=repeats, ks=list(ks),
                            step_repeats=step_repeats),
              **report, targets=targets(report['greedy'], report['steps']))


def environment() -> dict:
  """hf_baseline's versions and threads, the CPU's name, XLA_FLAGS."""
  cpu = ''
  if os.path.exists('/proc/cpuinfo'):
    with open('/proc/cpuinfo') as f:
      cpu = next((line.split(':', 1)[1].strip() for line in f
                  if line.startswith('model name')), '')
  return dict(hf_baseline.environment(), cpu=cpu,
              xla_flags=os.environ.get('XLA_FLAGS', ''))


def to_markdown(report: dict) -> str:
  """The report's tables: greedy, step costs, logits, targets."""
  def fmt(value, digits=4):
    if isinstance(value, bool):
      return 'yes' if value else 'no'
    if isinstance(value, float):
      return f'{value:.{digits}g}'
    return '' if value is None else str(value)

  greedy = [[fmt(row.get(c)) if c != 'fastest_hf' else
             ('*' if row['fastest_hf'] else '') for c in GREEDY_COLUMNS]
            for row in report['greedy']]
  step_columns = list(dict.fromkeys(c for row in report['steps']
                                    for c in row))
  tables = [
      tabulate.tabulate(greedy, headers=GREEDY_COLUMNS, tablefmt='github'),
      tabulate.tabulate([[fmt(row[c]) for c in step_columns]
                         for row in report['steps']],
                        headers=step_columns, tablefmt='github'),
      tabulate.tabulate([[fmt(v) for v in row.values()]
                         for row in report['logits']],
                        headers=list(report['logits'][0]) if report['logits']
                        else (), tablefmt='github'),
      tabulate.tabulate([[row['target'], fmt(row['figure'], 3),
                          fmt(row['met']), row['detail']]
                         for row in report['targets']],
                        headers=('target', 'figure', 'met', 'detail'),
                        tablefmt='github')]
  return '\n\n'.join(tables) + '\n'


def write_report(report: dict, output_dir: str):
  """llama_speed.json (the report) and llama_speed.md (its tables).

  Raises:
    errors.WriteError: either file could not be written (one line).
  """
  atomic_files.write_json(os.path.join(output_dir, 'llama_speed.json'),
                          report, indent=2)
  atomic_files.write_text(os.path.join(output_dir, 'llama_speed.md'),
                          to_markdown(report))


def _define_flags():
  """The CLI's flags, defined only when run as a program (as hf_baseline)."""
  flags.DEFINE_string('output_dir', None,
                      'Where llama_speed.json and llama_speed.md go.')
  flags.DEFINE_string('cache_dir', None,
                      'Where the random checkpoints are written once and '
                      'reused; default: <tmp>/bpd_jax_llama_speed.')
  flags.DEFINE_list('shapes', list(DEFAULT_SHAPES),
                    f'Shapes, of {sorted(SHAPES)}.')
  flags.DEFINE_list('dtypes', list(DTYPES), 'Dtypes, both sides.')
  flags.DEFINE_integer('prompt_len', 16, 'Prompt tokens, bos included.')
  flags.DEFINE_integer('new_tokens', 32, 'Tokens generated per decode.')
  flags.DEFINE_integer('repeats', 5, 'Timed decodes per system.')
  flags.DEFINE_list('ks', ['1', '2', '4', '8'],
                    'Block sizes of the step costs (1 first).')
  flags.DEFINE_integer('step_repeats', 3,
                       'Timings of each loop length in the step costs.')
  flags.mark_flags_as_required(['output_dir'])


def main(argv):
  options = flags.FLAGS
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  for shape in options.shapes:
    if shape not in SHAPES:
      raise app.UsageError(f'--shapes: unknown shape {shape!r}; known: '
                           f'{sorted(SHAPES)}.')
  for dtype in options.dtypes:
    if dtype not in DTYPES:
      raise app.UsageError(f'--dtypes: {dtype!r} is not one of {DTYPES}.')
  ks = [int(k) for k in options.ks]
  if ks[0] != 1 or any(k < 1 for k in ks):
    raise app.UsageError(f'--ks={options.ks}: block sizes >= 1, 1 first.')
  try:
    report = run(tuple(options.shapes), tuple(options.dtypes),
                 options.cache_dir, options.prompt_len, options.new_tokens,
                 options.repeats, tuple(ks), options.step_repeats)
  except ImportError as error:
    sys.exit(f'error: {error}')
  try:
    write_report(report, options.output_dir)
  except errors.WriteError as error:
    sys.exit(f'error: {error}')  # One line, as jobs.run reports it.
  print(to_markdown(report))


if __name__ == '__main__':
  _define_flags()
  app.run(main)
