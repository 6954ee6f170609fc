"""The domain core: OAuth2 use cases, tokens, keys and secrets. Nothing here imports Tornado."""
