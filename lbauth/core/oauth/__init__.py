"""The OAuth 2.0 authorization server (RFC 6749, 7009, 7662): client authentication, grants,
token minting, revocation and introspection behind one `AuthorizationServer`; no Tornado here."""
