"""Blockwise heads on a frozen imported model (Llama 2/3, Mistral, Qwen2,
SmolLM2, TinyLlama, GPT-2), with the model's own token ids.

    python -m bpd_jax.main --config=configs/hf_heads.py:model=/path/to/Llama-3.2-1B \
        --workdir=/tmp/bpd_llama

`model=DIR` is a local Hugging Face folder (config.json, model.safetensors
or its shards, tokenizer.json, generation_config.json where present, as
`save_pretrained` writes it or the Hub serves it), read without torch
(bpd_jax/models/imports/). The model section is its architecture and its
special ids; the base is its weights, frozen (bit-identical all along);
the proposal heads train on `data`, tokenised by the checkpoint's own
tokenizer with its ids (bpd_jax/tasks/text/hf_vocab.py); then the report
gives perplexity and greedy vs blockwise decoding of held-out prompts.

Data (`data=`):

    ''          the Python standard library's source (task 'python_source')
    DIR         a folder of text or code files, or one such file (task
                'text_files'): every text file, or those of ext=
    FILE.jsonl  prompts, one JSON object a line with a "prompt" or "text"
                field (task 'jsonl_prompts'), continued by the model itself

Prompts are continued by the distill job (the imported base is its model
while the workdir has no checkpoint), then the heads train on those
continuations:

    python -m bpd_jax.distill --config=configs/hf_heads.py:model=DIR,data=prompts.jsonl \
        --workdir=/tmp/bpd_prompts --output_dir=/tmp/bpd_continued
    python -m bpd_jax.main --config=configs/hf_heads.py:model=DIR,data=prompts.jsonl,distilled=/tmp/bpd_continued \
        --workdir=/tmp/bpd_prompts

(`distilled=` works with the other data too: the model's continuations of
the training text's prompts replace the text for training.)

Sizes follow the checkpoint: its positions (max_target_len), an example
of min(128, max_target_len / 2) tokens, prompts a quarter of that,
continuations half. tests/data/tiny_llama3 (and tiny_gpt2, tiny_qwen2, ...:
tiny random checkpoints written by scripts/make_tiny_hf.py and
make_tiny_gpt2.py) runs this in a minute on a CPU and shows the pipeline;
a 1B model trains its heads at accelerator speed, far slower on a CPU.

Options (`--config=configs/hf_heads.py:model=DIR,heads=independent`):

    model=DIR       the Hugging Face model folder (required)
    data=PATH       the text the heads learn from (above; '' the stdlib)
    ext=.py+.md     with data=DIR: the file name endings read ('' every
                    text file)
    heads=TYPE      sequential (default), independent (Medusa-1's), joint,
                    autoregressive (a draft layer, EAGLE's) or block (the
                    whole draft in one pass, DFlash's)
    k=K             proposal heads (default 8)
    steps=N         head training steps (default 2000)
    features=I+J    the draft layer or the block drafter also reads these
                    lower layers' outputs (0-based; '' the top only, the
                    block drafter's default layer 0 and the middle one;
                    'top' the top only; EAGLE-3, DFlash)
    block_layers=L  the block drafter's layers (default 1)
    correction=token
                    the corrected block drafter's correction reads only
                    the proposal before each head, not also the corrected
                    state before it (default recurrent: more tokens per
                    call at the same cost)
    targets=base    what heads 2..k learn: base (default: the model's own
                    distribution at each position, what exact verification
                    accepts) or data (the text's next tokens)
    inputs=data     what the dependent heads read as the earlier drafts:
                    data (teacher forcing) or own (their own drafts)
    distilled=DIR   train on the model's continuations the distill job
                    wrote there
    dtype=D         parameters and computation: '' (the checkpoint's
                    stored dtype), float32 or bfloat16

Guide: docs/guide/imported_models.md. Fields not set here keep
configs/base.py's value (documented there).
"""

import dataclasses
import os

from bpd_jax.infra import config_options
from bpd_jax.models import factory
from bpd_jax.models import drafters
from bpd_jax.models import imports

base = config_options.sibling(__file__, 'base')

DTYPES = ('', 'float32', 'bfloat16')


def get_config(arg=None):
  options = config_options.parse(arg, model='', data='', ext='',
                                 heads='sequential', k=8, steps=2000,
                                 features='', block_layers=1,
                                 correction='', targets='base',
                                 inputs='data', distilled='', dtype='')
  config_options.check_choice(options, 'heads', drafters.NAMES)
  config_options.check_choice(options, 'dtype', DTYPES)
  if not options['model']:
    raise ValueError('configs/hf_heads.py needs model=DIR: a Hugging Face '
                     'model folder (config.json, model.safetensors, '
                     'tokenizer.json), e.g. tests/data/tiny_llama3.')
  if options['k'] < 2:
    raise ValueError(f'config option k={options["k"]} must be >= 2.')
  dtype = options['dtype'] or None
  pretrained = imports.config_from(
      options['model'], num_proposal_heads=options['k'],
      head_layer=options['heads'], dtype=dtype, param_dtype=dtype)
  length = min(128, pretrained.max_target_len // 2)
  config = base.get_config()
  config.task = _task(options, length)

  model = config.model
  # The checkpoint's architecture and ids (every field but the run's own:
  # its heads, dtypes, input width; the vocabulary's size is the task's).
  architecture = dataclasses.asdict(pretrained)
  for name in (*factory.RUN_FIELDS, 'image', 'vocab_size'):
    architecture.pop(name)
  model.update(architecture)
  model.size = 'tiny'  # Unused: every size field comes from config.json.
  model.dtype = pretrained.dtype  # Computation, the heads' too.
  model.param_dtype = pretrained.param_dtype  # Parameters, the heads' too.
  model.dropout_rate = 0.0  # The base is frozen; the heads need none.
  model.max_source_len = length // 4 + 1  # Input width: start token, prompt.
  model.num_proposal_heads = options['k']  # k heads.
  model.head_hidden = pretrained.d_model  # One head's hidden width.
  # The drafter, the lower layers it reads, a block drafter's layers
  # (configs/base.py).
  base.drafter(config, options['heads'], options['features'],
               options['block_layers'], options['correction'])

  train = config.train
  train.batch_size = 8  # Examples a step.
  train.base_steps = 0  # The imported model is the base.
  train.head_steps = options['steps']  # Phase 'heads', on the frozen base.
  train.init_from = options['model']  # The base's weights.
  train.freeze_base = True  # The imported model stays bit-identical.
  # Heads 2..k learn from half of each row's positions (the draft layer:
  # all of them, it attends over every position).
  train.head_position_fraction = (1.0 if options['heads'] == 'autoregressive'
                                  else 0.5)
  train.head_targets = options['targets']  # See configs/base.py.
  train.draft_inputs = options['inputs']  # See configs/base.py.
  train.label_smoothing = 0.0  # Plain likelihood of the targets.
  train.learning_rate = 1e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = max(1, min(200, options['steps'] // 10))  # Warm-up.
  train.schedule = 'linear'  # To zero at the end of the phase.
  train.log_every = max(1, min(100, options['steps'] // 10))  # Progress lines.

  ev = config.eval
  ev.num_examples = 100  # Prompts decoded (0: all).
  ev.max_len = length // 2  # Tokens generated per prompt (and distilled).
  ev.ks = tuple(k for k in (2, 4, 6, 8) if k <= options['k'])  # Block sizes.
  ev.criteria = ('exact',)  # Verification: exact returns greedy's output.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = base.drafts_config(num_examples=100, lm_steps=1000)
  config.drafts.ks = tuple(k for k in (4, 8) if k <= options['k'])
  if drafters.dependent(options['heads']):
    # Refinement's lattice is of independent heads: the analysis only.
    config.drafts.refinements = ()
  return config


def _task(options: dict, length: int):
  """The task section of `data`: the standard library's source, a folder
  (or file) of text, or a JSONL file of prompts; the checkpoint's
  tokenizer."""
  data = options['data']
  task = base.get_config().task
  if not data:
    task.name = 'python_source'  # The standard library's source, by file.
    task.root = ''  # The standard library's.
    task.train_files = 0  # Every training file.
    task.vocab_size = 1024  # Unused: the checkpoint's vocabulary is fixed.
    task.vocab_lines = 0  # Unused: nothing is trained.
  elif not os.path.exists(data):
    raise FileNotFoundError(f'data={data}: no such folder or file.')
  elif data.endswith('.jsonl') and os.path.isfile(data):
    task.name = 'jsonl_prompts'  # Prompts the model continues itself.
    task.path = data  # One JSON object a line: "prompt" or "text".
  else:
    task.name = 'text_files'  # A folder of text or code, or one file.
    task.root = data
    # File name endings read (): every text file.
    task.extensions = tuple(e for e in options['ext'].split('+') if e)
    task.vocab_size = 1024  # Unused: the checkpoint's vocabulary is fixed.
    task.vocab_lines = 0  # Unused: nothing is trained.
  if options['ext'] and task.name != 'text_files':
    raise ValueError(f'config option ext={options["ext"]} picks the files '
                     f'of a folder: give data=DIR.')
  task.vocab_type = 'hf'  # The checkpoint's tokenizer and ids...
  task.vocab_path = options['model']  # ...from its folder.
  task.distilled = options['distilled']  # The model's own continuations.
  task.max_source_len = length // 4  # Tokens of a prompt.
  # Tokens of an example (an LM's training length) or of a continuation.
  task.max_target_len = length
  return task
