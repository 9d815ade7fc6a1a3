"""XLA flags of the test processes: compile fast rather than run fast.

The tests' models are tiny: compiling their thousands of programs costs more
than running them. So: unoptimised machine code; XLA's elemental emitters,
which compile faster than its newer fusion emitters; each program's code
emitted in one piece and its thunks scheduled in program order, since the
suite's workers already keep every core busy and splitting one compile
over threads only adds work.
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
