"""Blockwise heads on a pretrained GPT-2 (Medusa-style: a frozen base).

    python -m bpd_jax.main --config=configs/gpt2_heads.py:gpt2=/path/to/gpt2 \
        --workdir=/tmp/bpd_gpt2

`gpt2=DIR` is a GPT-2 folder as Hugging Face stores it (config.json,
model.safetensors, vocab.json, merges.txt; e.g. what `save_pretrained`
writes or the Hub's `gpt2` repository holds), read without torch
(bpd_jax/models/gpt2.py). The model section is set from its config.json,
the base is GPT-2's weights, frozen (bit-identical all along), and the
proposal heads train on the 'python_source' task (the standard library's
code, bpd_jax/tasks/lm/python_source.py) tokenised with GPT-2's own BPE;
then the report gives perplexity and greedy vs blockwise decoding of
held-out code prompts.

Sizes follow the checkpoint: an example is min(128, n_positions / 2)
tokens, the prompt a quarter of that, continuations half. The repository's
tests/data/tiny_gpt2 (a tiny random GPT-2 written by
scripts/make_tiny_gpt2.py) runs this in minutes on a CPU and shows the
pipeline; GPT-2 small (124M parameters) trains its heads at a few steps a
second on an accelerator, far slower on a CPU.

Options (`--config=configs/gpt2_heads.py:gpt2=DIR,heads=independent`):

    gpt2=DIR        the GPT-2 folder (required)
    heads=TYPE      sequential (default), independent (Medusa-1's), joint
                    or autoregressive
    k=K             proposal heads (default 8)
    steps=N         head training steps (default 2000)
    root=DIR        another directory of Python code ('': the stdlib's)
    features=I+J    the autoregressive draft layer also reads these lower
                    layers' outputs (0-based; '' the top only; EAGLE-3)
    targets=data    what heads 2..k learn: data (the text's tokens) or
                    base (GPT-2's own distribution at each position, what
                    exact verification accepts)
    inputs=data     what the dependent heads read as the earlier drafts:
                    data (teacher forcing) or own (their own drafts)

Guide: docs/guide/language_models.md; no GPT-2 run has been measured here
yet. Fields not set here keep configs/base.py's value (documented there).
"""

import dataclasses
import os

from bpd_jax.infra import config_options
from bpd_jax.models import gpt2 as gpt2_lib
from bpd_jax.models import heads as heads_lib

base = config_options.sibling(__file__, 'base')


def get_config(arg=None):
  options = config_options.parse(arg, gpt2='', heads='sequential', k=8,
                                 steps=2000, root='', features='',
                                 targets='data', inputs='data')
  config_options.check_choice(options, 'heads', heads_lib.HEAD_LAYERS)
  if not options['gpt2']:
    raise ValueError('configs/gpt2_heads.py needs gpt2=DIR: a GPT-2 folder '
                     '(config.json, model.safetensors, vocab.json, '
                     'merges.txt), e.g. tests/data/tiny_gpt2.')
  if options['k'] < 2:
    raise ValueError(f'config option k={options["k"]} must be >= 2.')
  pretrained = gpt2_lib.config_from_hf(
      gpt2_lib.read_config(options['gpt2']),
      num_proposal_heads=options['k'], head_layer=options['heads'],
      origin=os.path.join(options['gpt2'], gpt2_lib.CONFIG_FILE))
  length = min(128, pretrained.max_target_len // 2)
  config = base.get_config()

  task = config.task
  task.name = 'python_source'  # The standard library's source, by file.
  task.root = options['root']  # Directory of *.py files ('': the stdlib's).
  task.train_files = 0  # First N training files (0: all).
  task.vocab_type = 'gpt2'  # GPT-2's byte-level BPE...
  task.vocab_path = options['gpt2']  # ...from the checkpoint folder.
  task.vocab_size = 50_257  # Unused: GPT-2's vocabulary is fixed.
  task.vocab_lines = 0  # Unused: nothing is trained.
  task.max_source_len = length // 4  # Tokens of an evaluation prompt.
  task.max_target_len = length  # Tokens of an example: the training length.

  model = config.model
  # GPT-2's architecture, from its config.json (every field but the heads').
  architecture = dataclasses.asdict(pretrained)
  for name in ('num_proposal_heads', 'head_layer', 'head_hidden', 'image',
               'draft_source', 'draft_feature_layers',
               'vocab_size'):  # The vocabulary's size: the task's.
    architecture.pop(name)
  model.update(architecture)
  model.size = 'tiny'  # Unused: every size field comes from config.json.
  model.dropout_rate = 0.0  # The base is frozen; the heads need none.
  model.max_source_len = length // 4 + 1  # Input width: start token, prompt.
  model.num_proposal_heads = options['k']  # k heads.
  model.head_layer = options['heads']  # See configs/base.py.
  model.head_hidden = pretrained.d_model  # One head's hidden width.
  # Lower layers the draft layer reads (configs/base.py).
  model.draft_feature_layers = config_options.layers(options['features'])

  train = config.train
  train.batch_size = 8  # Examples a step.
  train.base_steps = 0  # GPT-2 is the base.
  train.head_steps = options['steps']  # Phase 'heads', on the frozen base.
  train.init_from = options['gpt2']  # The base's weights.
  train.freeze_base = True  # GPT-2 stays bit-identical.
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
  ev.max_len = length // 2  # Tokens generated per prompt.
  ev.ks = tuple(k for k in (2, 4, 6, 8) if k <= options['k'])  # Block sizes.
  ev.criteria = ('exact',)  # Verification: exact returns greedy's output.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = base.drafts_config(num_examples=100, lm_steps=1000)
  config.drafts.ks = tuple(k for k in (4, 8) if k <= options['k'])
  if heads_lib.dependent(options['heads']):
    # Refinement's lattice is of independent heads: the analysis only.
    config.drafts.refinements = ()
  return config
