"""``servefleet bench``, its pure half: scenarios as data, one run's figures, the records a
node keeps per release, the per-scenario summary over seeds and the comparison of two
profiles with a control (the noise band). Running the load generator on the node is
:mod:`servefleet.adapters.bench`; see ``docs/bench.md``.
"""
