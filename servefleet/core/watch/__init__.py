"""``servefleet watch``'s pure part: samples of an engine, the verdict over a window of
them, and the recovery decision, all plain data (``docs/watch.md``)."""
