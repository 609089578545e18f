"""The drop-in Messages endpoint's use case: conversation identity, reconcile, upstream request, stream relay."""
