"""marshmallow schemas: they validate requests, shape responses and are the OpenAPI source."""
