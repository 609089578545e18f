"""ASGI middleware of the HTTP app, one module each (added in api/http/app.py)."""
