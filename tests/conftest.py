"""Test setup: 8 simulated CPU devices, so sharded decoding can be tested.

The flag must be set before jax creates its CPU client; conftest.py is
imported before any test module.
"""

import os

os.environ['XLA_FLAGS'] = ' '.join(
    [os.environ.get('XLA_FLAGS', ''),
     '--xla_force_host_platform_device_count=8']).strip()
