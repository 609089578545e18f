"""Use cases over Resources: append, compact, serve, observe, sweep, prune, expire, simulate."""
