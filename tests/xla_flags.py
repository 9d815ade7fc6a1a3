"""XLA flags of the test processes: compile fast rather than run fast.

The tests' models are tiny: compiling their thousands of programs costs more
than running them. Unoptimised machine code compiles ~30% faster (measured
on the generate tests), and XLA's elemental emitters, rather than its newer
fusion emitters, another ~15% (the exact-decoding property test: 33-34
against 39-41 s).
What a test compares (blockwise against greedy, sharded against unsharded)
runs under the same flags. The flags exist in the jax versions
requirements.txt allows; XLA stops at start-up on one it does not know.
"""

COMPILE_FAST = ' '.join([
    '--xla_backend_optimization_level=0',
    '--xla_cpu_use_fusion_emitters=false',
])
