"""The small autoregressive LM of local neural rescoring, and its training.

A decoder-only `Transformer` that reads a fixed window of w output tokens
(bos repeated before an output's start, as the decoder supplies it:
`refine.Refinement.context`) and predicts the next one. Fixed shapes keep
it inside the decoding loop; it is trained here on windows of the training
targets, a few thousand steps on a CPU.
"""

import json
import os
import time
import types
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from bpd_jax.infra import atomic_files
from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.models.transformer import Transformer, TransformerConfig
from bpd_jax.training import optim

ARCHITECTURE = 'architecture.json'  # Beside the checkpoints: what `make` needs.


def make(vocab_size: int, window: int, *, d_model: int = 64,
         layers: int = 2, seed: int = 0) -> Transformer:
  """A decoder-only Transformer for windows of `window` tokens."""
  if not isinstance(window, int) or window < 1:
    raise ValueError(f'the LM window must be an integer >= 1, got '
                     f'{window!r}.')
  config = TransformerConfig(
      vocab_size=vocab_size, d_model=d_model, d_ff=4 * d_model,
      num_heads=max(1, d_model // 32), num_encoder_layers=0,
      num_decoder_layers=layers, dropout_rate=0.0, max_source_len=1,
      max_target_len=window, num_proposal_heads=1)
  return Transformer(config, rngs=nnx.Rngs(seed))


def windows(sentences: Sequence[Sequence[int]], window: int, *, bos_id: int,
            eos_id: int) -> np.ndarray:
  """[N, window + 1]: every window of the padded targets and its next token.

  Each sentence (eos appended where missing) is preceded by `window` bos
  tokens, so that every token is predicted from exactly the context the
  decoder gives the rescorer.
  """
  rows = []
  for sentence in sentences:
    ids = list(sentence)
    if not ids or ids[-1] != eos_id:
      ids.append(eos_id)
    padded = np.array([bos_id] * window + ids, np.int32)
    for i in range(window, len(padded)):
      rows.append(padded[i - window:i + 1])
  if not rows:
    raise ValueError('no sentences to train the rescoring LM on.')
  return np.stack(rows)


def train(model: Transformer, data: np.ndarray, *, steps: int,
          batch_size: int = 256, learning_rate: float = 3e-3,
          seed: int = 0, log=print) -> dict:
  """Trains `model` in place on rows of `windows`; returns loss figures.

  Each row predicts its last token from the w before it (the position the
  decoder reads), and every earlier position its own next token too (more
  signal per step from the same windows).
  """
  if steps < 1:
    raise ValueError(f'LM training needs steps >= 1, got {steps}.')
  graphdef, params = nnx.split(model)
  # The project's optimizer (Adam, linear warm-up, rsqrt decay), unclipped.
  optimizer = optim.make_optimizer(types.SimpleNamespace(
      learning_rate=learning_rate, warmup_steps=max(1, min(200, steps // 10)),
      clip_norm=0.0, grad_accum_steps=1))
  opt_state = optimizer.init(params)

  def loss_fn(params, batch):
    lm = nnx.merge(graphdef, params)
    logits = lm.logits(lm(None, batch[:, :-1])).astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits,
                                                             batch[:, 1:])
    return losses.mean(), losses[:, -1].mean()

  @jax.jit
  def step(params, opt_state, batch):
    (loss, last), grads = jax.value_and_grad(loss_fn, has_aux=True)(params,
                                                                    batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, last

  rng = np.random.default_rng(seed)
  begin, last = time.perf_counter(), float('nan')
  for i in range(steps):
    batch = data[rng.integers(0, len(data), batch_size)]
    params, opt_state, loss, last = step(params, opt_state, batch)
    if (i + 1) % max(steps // 5, 1) == 0:
      log(f'  LM step {i + 1}/{steps}: loss {float(loss):.3f}, at the read '
          f'position {float(last):.3f}')
  nnx.update(model, params)
  return dict(steps=steps, final_loss=round(float(loss), 4),
              final_loss_at_window_end=round(float(last), 4),
              seconds=round(time.perf_counter() - begin, 1))


def evaluate(model: Transformer, data: np.ndarray,
             batch_size: int = 1024) -> float:
  """Mean cross-entropy (nats) of each row's last token given its window."""
  @jax.jit
  def losses(batch):
    logits = model.logits(model(None, batch[:, :-1])[:, -1])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), batch[:, -1])
  total = [np.asarray(losses(data[i:i + batch_size]))
           for i in range(0, len(data), batch_size)]
  return float(np.concatenate(total).mean())


def save(model: Transformer, directory: str) -> None:
  """Writes the LM to `directory`: an Orbax checkpoint of its weights
  (`checkpoints.py`, as training runs save theirs) and its architecture."""
  config = model.config
  atomic_files.write_json(os.path.join(directory, ARCHITECTURE), dict(
      vocab_size=config.vocab_size, window=config.max_target_len,
      d_model=config.d_model, layers=config.num_decoder_layers))
  checkpoints = checkpoints_lib.Checkpoints(directory, max_to_keep=1)
  checkpoints.save(0, dict(params=nnx.state(model)))
  checkpoints.wait()
  checkpoints.close()


def load(directory: str) -> Transformer:
  """The LM `save` wrote to `directory`."""
  with open(os.path.join(directory, ARCHITECTURE)) as f:
    architecture = json.load(f)
  model = make(architecture['vocab_size'], architecture['window'],
               d_model=architecture['d_model'], layers=architecture['layers'])
  graphdef, state = nnx.split(model)
  checkpoints = checkpoints_lib.Checkpoints(directory, max_to_keep=1)
  restored = checkpoints.restore(
      checkpoints.latest_step(),
      checkpoints_lib.abstract_like(dict(params=state)))
  checkpoints.close()
  return nnx.merge(graphdef, restored['params'])
