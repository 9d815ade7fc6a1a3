"""Test setup: 8 simulated CPU devices, so sharded decoding can be tested,
XLA's CPU backend set to compile fast (tests/xla_flags.py), and each test
process's compiled programs kept on disk for the run.

The flags must be set before jax creates its CPU client; conftest.py is
imported before any test module.
"""

import os
import tempfile

import xla_flags

os.environ['XLA_FLAGS'] = ' '.join(
    [os.environ.get('XLA_FLAGS', ''),
     '--xla_force_host_platform_device_count=8',
     xla_flags.COMPILE_FAST]).strip()

import gc
import shutil

import jax
import pytest

# A disk cache of compiled programs for this test process: the same tiny
# programs recur across test files (each file's in-memory cache is dropped
# after it, below), and one read back from disk skips XLA's compiler; the
# default run takes about an eighth less time. Every program is kept, however
# fast it compiled. Set here, not in the environment, so each worker has
# its own and the jobs tests start (some of them side by side) use none:
# jax writes an entry in place, and a process reading one another is still
# writing would get it truncated. JAX's log of each compilation ('Finished
# XLA compilation') still names a program read back, so the tests that
# count compilations see it. Deleted at the end (pytest_unconfigure).
_CACHE_DIR = tempfile.mkdtemp(prefix='bpd_jax_tests_xla_')
jax.config.update('jax_compilation_cache_dir', _CACHE_DIR)
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)


@pytest.fixture(autouse=True, scope='module')
def _release_compiled_programs():
  """Drops every compiled program after each test module.

  The suite compiles thousands of XLA programs in one process; each keeps
  memory mappings for its code, and a process has at most
  vm.max_map_count (65,530 by default) of them. Whole-suite runs crashed
  inside XLA's compiler late in the run (a segfault or abort, always in a
  test that passes alone) once the image and draft tests were added.
  Modules share no compiled program worth keeping.
  """
  yield
  jax.clear_caches()
  gc.collect()


def pytest_unconfigure(config):
  """Deletes the compiled-program cache this process made."""
  del config
  shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
  """Workers of `-n auto`: one per core, at most 4.

  Each worker holds its own JAX client with 8 simulated devices and its
  compiled programs (a few GiB); more workers than cores only compete.
  """
  del config
  cores = (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')
           else os.cpu_count() or 1)  # The cores this process may use.
  return max(1, min(cores, 4))


# The test files that take longest (`python -m pytest --durations=40`,
# summed per file), longest first. The workers take whole files in
# collection order (`--dist loadfile --no-loadscope-reorder`); xdist's own
# order, by number of tests, started the one-test README file and the
# subprocess jobs last, and one worker ran them alone for a minute.
LONGEST_FIRST = ('test_main.py', 'test_generate.py', 'test_training_train.py',
                 'test_readme.py', 'test_sampling.py', 'test_bench_runner.py',
                 'test_transformer.py', 'test_training_losses.py', 'test_jobs.py')


def pytest_collection_modifyitems(config, items):
  """Collects the longest files first (stable otherwise)."""
  del config
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
