"""Checkpoints of other libraries, as the project's Transformer.

- reader.py: a local Hugging Face model folder (config files and
  safetensors weights, one file or shards), read without torch; the one
  reader the family importers share.
"""
