"""The `lbauth` command and the tools/ scripts in real child processes, forked from one that has
already imported lbauth (a "zygote", one per test process), instead of started from scratch.

A command is still a process of its own, with its own argv, environment, working directory,
standard input, output and error, and exit status: only its imports (about 1.2 s of CPU a run,
half of the suite's CPU in child processes) are done once. `python -m lbauth` itself, the
installed `lbauth` script and `lbauth serve` are still started from scratch elsewhere
(tests/processes.py, test_end_to_end.py, test_settings.py).

The zygote listens on a Unix socket. Per command, it forks a child that reads one request
(args, env, cwd and three file paths), sends its pid, points fds 0, 1 and 2 at the files, runs
the command, and sends its exit status before it exits.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _serve(path: str) -> None:
    """The zygote: import what commands import, then fork a child per connection."""
    import lbauth.cli  # noqa: F401 - imported once, here, for every child
    import lbauth.core.crypto.reseal  # noqa: F401 - the tools' imports
    import lbauth.server  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _child(conn)  # never returns
        conn.close()


def _child(conn: socket.socket) -> None:
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        request = json.loads(conn.makefile("rb").readline())
        conn.sendall(f"{os.getpid()}\n".encode())
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for fd, (name, mode) in enumerate((("stdin", os.O_RDONLY), ("stdout", os.O_WRONLY), ("stderr", os.O_WRONLY))):
            opened = os.open(request[name], mode)
            os.dup2(opened, fd)
            os.close(opened)
        random.seed()  # not the zygote's state, shared by every child
        sys.argv = [request["argv0"], *request["args"]]
        try:
            if request["script"]:
                runpy.run_path(request["script"], run_name="__main__")
                code = 0
            else:
                from lbauth.cli import main
                code = main(request["args"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if exit_.code is not None and not isinstance(exit_.code, int):
                print(exit_.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - a traceback on stderr, as Python prints it
            import traceback
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        conn.sendall(f"{code}\n".encode())
    finally:
        os._exit(code)


class Zygote:
    """The test process's zygote, started on first use and stopped when the process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="lbauth-zygote-"))
        self.path = str(self._dir / "socket")

    def _started(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
                if os.path.exists(self.path):
                    os.unlink(self.path)
                self._proc = subprocess.Popen([sys.executable, "-m", "tests.forked", self.path], cwd=ROOT, env=env,
                                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
                assert self._proc.stdout is not None and self._proc.stdout.readline().strip() == "ready"
                atexit.register(self._proc.kill)
            return self.path

    def run(self, args: list[str], *, env: dict[str, str], cwd: Path = ROOT, input: str | None = None,
            timeout: float = 60, script: str | None = None) -> subprocess.CompletedProcess[str]:
        """Like `subprocess.run(..., capture_output=True, text=True)` of `python -m lbauth ARGS`
        (or of `python SCRIPT ARGS`)."""
        with tempfile.TemporaryDirectory(dir=self._dir) as work:
            files = {name: os.path.join(work, name) for name in ("stdin", "stdout", "stderr")}
            for name in ("stdout", "stderr"):
                Path(files[name]).touch()
            Path(files["stdin"]).write_text(input or "")
            request = {"args": args, "env": env, "cwd": str(cwd), "script": script,
                       "argv0": script or "lbauth", **files}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn, conn.makefile("rb") as answers:
                conn.connect(self._started())
                conn.sendall(json.dumps(request).encode() + b"\n")
                pid = int(answers.readline())
                conn.settimeout(timeout)
                deadline = time.monotonic() + timeout
                try:
                    line = answers.readline()
                except TimeoutError:
                    os.killpg(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(["lbauth", *args], timeout) from None
                status = int(line) if line.strip() else -signal.SIGKILL  # killed before it answered
                _wait_gone(pid, deadline)
            return subprocess.CompletedProcess([script or "lbauth", *args], status, Path(files["stdout"]).read_text(),
                                               Path(files["stderr"]).read_text())


def _wait_gone(pid: int, deadline: float) -> None:
    """Until the child has exited (its output files are complete once it has)."""
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.002)


ZYGOTE = Zygote()

if __name__ == "__main__":
    _serve(sys.argv[1])
