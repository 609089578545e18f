"""Third-party test data: its manifest and `make data`."""
