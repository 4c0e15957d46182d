"""The pure core: models, validation, rendering, hashing, planning and parsing.

Nothing in here touches the network, a subprocess or a remote host; every function is
tested with plain data. Side effects live in :mod:`servefleet.adapters`.
"""
