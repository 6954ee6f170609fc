"""lbauth: an OAuth2 authorization and token service.

This package root imports nothing, so that `lbauth.verify` stays usable in a resource service
that has only the standard library, PyJWT and cryptography installed.
"""

__version__ = "0.1.0"
