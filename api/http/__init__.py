"""The HTTP edge: the FastAPI app, its middleware, routes, schemas and problem+json errors."""
