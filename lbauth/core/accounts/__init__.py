"""Users and their sign-in: accounts, passwords (sessions will join)."""
