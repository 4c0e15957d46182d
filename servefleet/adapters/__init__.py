"""Adapters: the thin layer with side effects (SSH, HTTP probes, NVML, Pulumi provider)."""
