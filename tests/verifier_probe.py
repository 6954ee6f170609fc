"""A resource service's view, in its own process: reads access tokens on standard input, one per
line, and answers each with `ok <kid>` or the subCode lbauth.verify refused it with. The line `?kids`
is answered with `kids` and the key ids the verifier holds now."""

import sys

import jwt

from lbauth.verify import TokenError, Verifier

issuer, audience = sys.argv[1], sys.argv[2]
verifier = Verifier(issuer, audience, leeway=1, poll_seconds=0.2, jwks_seconds=1.0, unknown_kid_seconds=0.5)
verifier.start()
print("ready", flush=True)
for line in sys.stdin:
    token = line.strip()
    if token == "?kids":
        print("kids", *sorted(verifier.keys), flush=True)
        continue
    try:
        verifier.verify(token)
        print("ok", jwt.get_unverified_header(token[7:])["kid"], flush=True)
    except TokenError as exc:
        print(exc.sub_code, flush=True)
verifier.close()
