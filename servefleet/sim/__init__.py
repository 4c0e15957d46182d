"""The simulated fleet: every way a simulated node differs from a real one lives here."""
