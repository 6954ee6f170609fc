"""OpenID Connect (contract section 15): ID tokens, claims by scope, the OpenID parameters of an
authorization request, and RP-initiated logout, on top of the OAuth core (core/oauth)."""
