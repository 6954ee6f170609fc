"""`lbauth serve`, stopped (SIGSTOP) at one point of one change, for tests/test_audit.py to SIGKILL it there.

AUDIT_PAUSE_AT names the point: `before_event` (the change's unit of work has made its change and not
yet written its audit event), `after_event` (it has written both and not yet committed) or
`before_answer` (committed, not yet answered). AUDIT_PAUSE_TYPE is the event's type and
AUDIT_PAUSE_PATH the request path whose answer to hold; the process writes AUDIT_PAUSE_MARKER when
it stops, so the test knows when to kill it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from lbauth.handlers import base
from lbauth.storage.repo import audit as audit_repo

POINT, TYPE, PATH = os.environ["AUDIT_PAUSE_AT"], os.environ["AUDIT_PAUSE_TYPE"], os.environ["AUDIT_PAUSE_PATH"]
MARKER = Path(os.environ["AUDIT_PAUSE_MARKER"])


def pause() -> None:
    MARKER.write_text(POINT)
    os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, the unit of work under way included


_insert_event = audit_repo.insert_event


def insert_event(conn: Any, **values: Any) -> None:
    if values["type"] == TYPE and POINT == "before_event":
        pause()
    _insert_event(conn, **values)
    if values["type"] == TYPE and POINT == "after_event":
        pause()


_send_data = base.BaseHandler.send_data


def send_data(self: base.BaseHandler, data: Any, status: int = 200) -> None:
    if POINT == "before_answer" and self.request.path == PATH:
        pause()
    _send_data(self, data, status)


audit_repo.insert_event = insert_event  # type: ignore[assignment]
base.BaseHandler.send_data = send_data  # type: ignore[method-assign]

if __name__ == "__main__":
    from lbauth.cli import main
    sys.exit(main(["serve"]))
