"""The lab as a service: a FastAPI application (``labctl serve``) that reads the store and sends every change
to the controller as a command on the web service's own stream (docs/web.md)."""
