"""servefleet: deploy LLM inference engines to GPU machines you own, and prove what booted."""

__version__ = "0.1.0"
