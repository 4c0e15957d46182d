"""``servefleet tune --measure``: the search over a vLLM profile's serving settings, pure.

* :mod:`.space`: the settings searched (a lattice of values per knob) and the overlay a
  point of it makes;
* :mod:`.slo`: the service-level objective (``ttft_p99<=2s,tpot_mean<=80ms``) and the score
  of a measured candidate under it;
* :mod:`.search`: compass search over the lattice, spending deploys only next to the best
  point so far, and the full grid it is measured against;
* :mod:`.report`: the table of every candidate and the verdict against the control.

The adapter that deploys, gates and benches each candidate is
:mod:`servefleet.adapters.tune`.
"""
