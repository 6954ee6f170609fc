#!/usr/bin/env python3
"""Rotate the master key that seals secrets at rest (docs/key-rotation.md).

The master key is a list: the first key seals, every key opens. With the key file in the data
dir (the default), a rotation is three steps, and running servers follow each within seconds:

    rotate_master_key.py status          key ids (first = sealing) and how many values each seals
    rotate_master_key.py add             a new key, added last: every server can open with it
    rotate_master_key.py promote KEY_ID  it seals from now on, and every stored value is re-sealed
    rotate_master_key.py retire KEY_ID   drop a key that no stored value needs any more

With LBAUTH_MASTER_KEY, the same steps are edits of that variable (and a restart of the servers);
`add` prints the key to append, and `reseal` re-seals under the first key once it is set.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from lbauth import cli
from lbauth.clock import SystemClock
from lbauth.core.crypto import reseal
from lbauth.core.crypto.keys import RotationRefused
from lbauth.core.crypto.masterkey import (
    MasterKeys,
    generate_key_text,
    key_file,
    load_master_keys,
    read_key_file,
    write_key_file,
)

SETTLE_SECONDS = 15  # servers re-read the key file every 5 s; wait a little longer than that


def _by_id(texts: list[str]) -> dict[str, str]:
    return {MasterKeys.parse(text, "key file").primary_id: text for text in texts}


def _file_texts(settings) -> list[str]:
    if settings.master_key:
        raise RotationRefused("the master keys come from LBAUTH_MASTER_KEY: edit that variable (see --help)")
    path = key_file(settings)
    if not path.exists():
        load_master_keys(settings)  # makes the first key, as a server would
    return read_key_file(path)


async def status(args, settings) -> list:
    """One record per key; a key id that seals stored values but is not configured is listed too
    (those values cannot be opened: restore that key)."""
    keys = load_master_keys(settings)
    counts = await cli.with_database(settings, reseal.sealed_counts)
    known = [{"keyId": kid, "configured": True, "sealing": kid == keys.primary_id, "sealedValues": counts.get(kid, 0)}
             for kid in keys.ids]
    return known + [{"keyId": kid, "configured": False, "sealing": False, "sealedValues": n}
                    for kid, n in sorted(counts.items()) if kid not in keys.ids]


async def add(args, settings) -> dict:
    text = generate_key_text()
    if settings.master_key:
        return {"keyId": key_id_of(text), "append": text,
                "next": "set LBAUTH_MASTER_KEY to the current value, a comma, and this key; restart every server"}
    texts = _file_texts(settings)
    write_key_file(key_file(settings), [*texts, text])
    return {"keyId": key_id_of(text), "next": f"wait {SETTLE_SECONDS} s for every server to load it, then promote it"}


def key_id_of(text: str) -> str:
    return MasterKeys.parse(text, "key").primary_id


async def promote(args, settings) -> dict:
    texts = _file_texts(settings)
    by_id = _by_id(texts)
    if args.key_id not in by_id:
        raise RotationRefused(f"no key {args.key_id} in the key file; `status` lists them")
    age = time.time() - os.stat(key_file(settings)).st_mtime
    if age < SETTLE_SECONDS and not args.force:
        raise RotationRefused(f"the key file changed {int(age)} s ago; servers may not have loaded the new key yet. "
                              f"Wait {SETTLE_SECONDS - int(age)} s more, or pass --force.")
    ordered = [by_id[args.key_id]] + [t for kid, t in by_id.items() if kid != args.key_id]
    write_key_file(key_file(settings), ordered)
    keys = MasterKeys.parse(",".join(ordered), "key file")
    changed = await cli.with_database(settings, lambda db: reseal.reseal_all(db, keys, SystemClock(), cli.operator()))
    return {"sealing": keys.primary_id, "resealed": changed}


async def reseal_now(args, settings) -> dict:
    keys = load_master_keys(settings)
    changed = await cli.with_database(settings, lambda db: reseal.reseal_all(db, keys, SystemClock(), cli.operator()))
    return {"sealing": keys.primary_id, "resealed": changed}


async def retire(args, settings) -> dict:
    texts = _file_texts(settings)
    by_id = _by_id(texts)
    if args.key_id not in by_id:
        raise RotationRefused(f"no key {args.key_id} in the key file")
    if args.key_id == next(iter(by_id)):
        raise RotationRefused(f"{args.key_id} is the sealing key; promote another key first")
    counts = await cli.with_database(settings, reseal.sealed_counts)
    if counts.get(args.key_id):
        raise RotationRefused(f"{counts[args.key_id]} stored values are still sealed under {args.key_id}; "
                              "run `promote` (or `reseal`) first")
    write_key_file(key_file(settings), [t for kid, t in by_id.items() if kid != args.key_id])
    return {"retired": args.key_id, "keys": [kid for kid in by_id if kid != args.key_id]}


def main(argv: list[str] | None = None) -> int:
    common = cli.settings_parser()
    parser = argparse.ArgumentParser(prog="rotate_master_key.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    sub.add_parser("status", parents=[common], help="keys and what they seal").set_defaults(handler=status)
    sub.add_parser("add", parents=[common], help="add a new key, last").set_defaults(handler=add)
    p = sub.add_parser("promote", parents=[common], help="seal with KEY_ID, and re-seal everything")
    p.add_argument("key_id", metavar="KEY_ID")
    p.add_argument("--force", action="store_true", help="do not wait for servers to load the key")
    p.set_defaults(handler=promote)
    sub.add_parser("reseal", parents=[common], help="re-seal everything under the first key").set_defaults(
        handler=reseal_now)
    p = sub.add_parser("retire", parents=[common], help="drop a key nothing is sealed under")
    p.add_argument("key_id", metavar="KEY_ID")
    p.set_defaults(handler=retire)
    args = parser.parse_args(argv)
    return cli.run(args, prog="rotate_master_key.py")


if __name__ == "__main__":
    sys.exit(main())
