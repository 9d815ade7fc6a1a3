"""The README's Python example runs as written."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_example_runs():
  with open(os.path.join(ROOT, 'README.md')) as f:
    blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
  assert blocks, 'the README has a Python example'
  for block in blocks:
    exec(compile(block, 'README.md', 'exec'), {})
