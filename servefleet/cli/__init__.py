"""Entry points: the ``servefleet`` command line."""
