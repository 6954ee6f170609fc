"""Keys and credentials: signing keys, the master key that seals secrets at rest, opaque prefixed credentials."""
