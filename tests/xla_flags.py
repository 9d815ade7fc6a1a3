"""XLA flags of the test processes: compile fast rather than run fast.

The tests' models are tiny: compiling their thousands of programs costs more
than running them. Unoptimised machine code compiles ~30% faster (measured
on the generate tests), and XLA's elemental emitters, rather than its newer
fusion emitters, another ~15% (the exact-decoding property test: 33-34
against 39-41 s). Each program's code is emitted in one piece and its
thunks scheduled in program order: the suite's workers already keep
every core busy, so splitting one compile over threads only adds work
(~9% on the head-layer and chi-square tests, interleaved runs).
What a test compares (blockwise against greedy, sharded against unsharded)
runs under the same flags. The flags exist in the jax versions
requirements.txt allows; XLA stops at start-up on one it does not know.
"""

COMPILE_FAST = ' '.join([
    '--xla_backend_optimization_level=0',
    '--xla_cpu_use_fusion_emitters=false',
    '--xla_cpu_parallel_codegen_split_count=1',
    '--xla_cpu_enable_concurrency_optimized_scheduler=false',
])
