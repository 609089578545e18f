"""Redis only: prompt entries, pending summaries, locks and claims, counters, /compact requests."""
