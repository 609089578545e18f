"""Working memory, pure: the typed document (model.py), what the worker observes in the turns
(observe.py) and what the nightly prune drops (prune.py). Storage is worker/store/memory.py."""
