"""The fleet's gateway: routes from the stack, HAProxy's configuration, and its runtime
state read back (see :mod:`servefleet.core.models.gateway` for the settings)."""
