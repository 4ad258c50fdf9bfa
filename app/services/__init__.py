"""Business rules shared by the HTTP layer, the CLI and the worker. Nothing here touches Flask's request."""
