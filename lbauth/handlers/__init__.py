"""HTTP handlers: thin adapters from Tornado requests to the core and back."""
