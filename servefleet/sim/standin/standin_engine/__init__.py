"""Stand-in inference engine for servefleet's simulated GPU nodes.

Seen from outside it behaves like the real engines: ``vllm serve`` (vLLM mode) and
``llama-server`` (llama.cpp mode). It parses the same command line, prints a boot log
in the real engine's exact line format, serves the same HTTP endpoints and fails the
ways real engines fail. It has no GPU and computes nothing: its figures (KV-cache
pool, load times) come from its own small arithmetic over a built-in model catalog
and the node described by environment variables.

This package is stdlib-only Python 3.11 and must never import servefleet: the
figures it prints are what servefleet's checks are tested against, so they must
not come from servefleet's own code.

Environment (all optional):

``STANDIN_ENGINE_VERSION``
    Emulated engine version: ``0.21.0`` (vLLM; default is the installed placeholder
    ``vllm.__version__``) or ``b8680`` (llama.cpp; default ``b8680``).
``STANDIN_GPU_NAME``, ``STANDIN_GPU_MEMORY_GIB``, ``STANDIN_UNIFIED_MEMORY``,
``STANDIN_COMPUTE_CAPABILITY``, ``STANDIN_GPU_COUNT``
    The simulated GPU (default: one NVIDIA GB10 with 128 GiB of unified memory,
    compute capability 12.1); a known GPU name brings its own defaults.
``STANDIN_TIME_SCALE``
    Factor applied to every simulated duration before sleeping (default 0.007): the
    log prints the real-looking figure, the process sleeps that figure times the
    scale, so a 289 s weight load takes 2 s and a whole boot 1-3 s.
``STANDIN_CONTROL_DIR``
    Folder holding the ``fault`` file (default ``/standin-control``).
``STANDIN_STATS_INTERVAL``
    Seconds between the periodic stats lines while requests are served (default 10).
``STANDIN_TQ_ASSERT_AT``
    When the TurboQuant continuation-prefill assertion fires without the PR #40798
    overlay: ``request`` (default; the first prompt longer than
    ``--max-num-batched-tokens`` kills the engine, as users report) or ``warmup``
    (the boot fails during the warm-up run).

Faults: one word per line in ``$STANDIN_CONTROL_DIR/fault`` (see ``faults.py``).
"""

__all__ = ["__version__"]

__version__ = "1.0.0"
