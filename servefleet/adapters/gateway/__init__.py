"""The fleet's gateway on its node: its runtime API (through SSH), its rollout, and the
hooks that drain and re-admit engines around theirs."""
