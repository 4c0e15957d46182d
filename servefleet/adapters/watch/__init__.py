"""``servefleet watch``'s side effects: the one-round-trip node read, the kept-open
connections with backoff, and recovery through the rollout machinery."""
