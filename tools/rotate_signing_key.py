#!/usr/bin/env python3
"""Rotate the JWS signing key with no failed request (docs/key-rotation.md).

    rotate_signing_key.py status                  the keys and what each next step is waiting for
    rotate_signing_key.py stage [--alg ES256]     publish a new key in the JWKS; it does not sign yet
    rotate_signing_key.py promote [--alg ES256]   the staged key signs; the old key of its algorithm
                         [--grace 900]            keeps verifying
    rotate_signing_key.py promote --kid OLD       roll back: the retiring key signs again
    rotate_signing_key.py retire                  unpublish keys once nothing they signed can be live

The key ring holds one active key per algorithm: LBAUTH_SIGNING_ALG's signs access
tokens, and each algorithm apps choose for their ID tokens (RS256 by default) signs those. Each
algorithm is rotated on its own: stage, promote and retire name it with --alg (stage defaults to
LBAUTH_SIGNING_ALG; promote needs it only when keys of several algorithms are staged).

Each step refuses what would make a valid token fail, says why and how long to wait; --force
overrides. Settings (database, master key) come as for `lbauth`: flags, LBAUTH_*, --config.
Running servers pick up every change within seconds, without a restart.
"""

from __future__ import annotations

import argparse
import sys

from lbauth import cli
from lbauth.clock import SystemClock
from lbauth.core.crypto import keys
from lbauth.core.crypto.reseal import master_keys_for
from lbauth.settings import SIGNING_ALGS


async def status(args, settings) -> list:
    return await cli.with_database(settings, lambda db: keys.rotation_status(
        db, SystemClock(), access_ttl=settings.longest_signed_ttl, grace=args.grace, leeway=args.leeway))


async def stage(args, settings) -> dict:
    async def work(db) -> dict:
        return await keys.stage_key(db, SystemClock(), await master_keys_for(db, settings),
                                    args.alg or settings.signing_alg, cli.operator())
    return await cli.with_database(settings, work)


async def promote(args, settings) -> dict:
    return await cli.with_database(settings, lambda db: keys.promote_key(
        db, SystemClock(), kid=args.kid, alg=args.alg, grace=args.grace, force=args.force,
        access_alg=settings.signing_alg, actor=cli.operator()))


async def retire(args, settings) -> list:
    return await cli.with_database(settings, lambda db: keys.retire_keys(
        db, SystemClock(), access_ttl=settings.longest_signed_ttl, kid=args.kid, leeway=args.leeway,
        force=args.force, actor=cli.operator()))


def main(argv: list[str] | None = None) -> int:
    common = cli.settings_parser()
    parser = argparse.ArgumentParser(prog="rotate_signing_key.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    p = sub.add_parser("status", parents=[common], help="the keys and when each next step is safe")
    p.add_argument("--grace", type=int, default=keys.DEFAULT_GRACE_SECONDS)
    p.add_argument("--leeway", type=int, default=keys.VERIFIER_MAX_LEEWAY)
    p.set_defaults(handler=status)
    p = sub.add_parser("stage", parents=[common], help="publish a new key (not signing yet)")
    p.add_argument("--alg", choices=SIGNING_ALGS, help="default: the signing_alg setting")
    p.set_defaults(handler=stage)
    p = sub.add_parser("promote", parents=[common], help="the staged key starts signing")
    # A kid (RFC 7638, base64url) may begin with "-": write --kid=KID, which argparse always takes.
    p.add_argument("--kid", help="promote this key (a staged one, or a retiring one to roll back); "
                                 "write --kid=KID, since a kid may begin with -")
    p.add_argument("--alg", choices=SIGNING_ALGS, help="the algorithm whose staged key to promote")
    p.add_argument("--grace", type=int, default=keys.DEFAULT_GRACE_SECONDS,
                   help="seconds a staged key must have been published (default %(default)s)")
    p.add_argument("--force", action="store_true", help="skip the safety check")
    p.set_defaults(handler=promote)
    p = sub.add_parser("retire", parents=[common], help="unpublish keys nothing live was signed with")
    p.add_argument("--kid", help="only this key (write --kid=KID)")
    p.add_argument("--leeway", type=int, default=keys.VERIFIER_MAX_LEEWAY,
                   help="the largest clock leeway your verifiers allow (default %(default)s s)")
    p.add_argument("--force", action="store_true", help="skip the safety check")
    p.set_defaults(handler=retire)
    args = parser.parse_args(argv)
    return cli.run(args, prog="rotate_signing_key.py")


if __name__ == "__main__":
    sys.exit(main())
