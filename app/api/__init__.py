"""The HTTP layer: one blueprint per resource over the services."""
