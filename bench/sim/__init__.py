"""A simulated cluster for driving Stratus searchers through their pure interface (bench only)."""
