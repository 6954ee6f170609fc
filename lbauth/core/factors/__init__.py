"""Second factors (contract 19, without passkeys so far): TOTP authenticators (RFC 6238), single-use
recovery codes, and the second step of a sign-in or a password reset."""
