"""bpd_jax: blockwise parallel decoding for JAX/Flax Transformers."""
