"""vLLM-style log lines: ``(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message``.

Formatted log lines go to stdout (vLLM's default stream), uvicorn's server lines and uncaught
tracebacks to stderr.  One rank is one Python process; its simulated vLLM processes
(APIServer, EngineCore_DP0, Worker_TPn) are ``ProcLog`` objects whose pids are the real pid
plus a fixed offset.  Every write is flushed, so ``docker logs`` sees lines immediately.
"""
import os
import socket
import sys
import threading
import time

ENGINE_PID_OFFSET = 97
WORKER_PID_OFFSET = 211
_lock = threading.RLock()


def _write(text, stderr=False):
    stream = sys.stderr if stderr else sys.stdout
    with _lock:
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            pass


def flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


class ProcLog:
    """Logger of one simulated process; ``name=None`` means no process prefix."""

    def __init__(self, name, pid):
        self.name, self.pid = name, pid
        self.prefix = f"({name} pid={pid}) " if name else ""

    def _log(self, level, where, message):
        stamp = time.strftime("%m-%d %H:%M:%S")
        _write("".join(f"{self.prefix}{level} {stamp} [{where}] {line}\n" for line in str(message).split("\n")))

    def info(self, where, message):
        self._log("INFO", where, message)

    def warning(self, where, message):
        self._log("WARNING", where, message)

    def error(self, where, message):
        self._log("ERROR", where, message)

    def raw(self, text, stderr=False):
        """Unformatted line(s) with only the process prefix (uvicorn, NCCL, tracebacks)."""
        _write("".join(f"{self.prefix}{line}\n" for line in str(text).split("\n")), stderr)

    def nccl(self, message):
        self.raw(f"{socket.gethostname()}:{self.pid}:{self.pid + 3} [0] NCCL INFO {message}")

    def uvicorn(self, message):
        self.raw(f"INFO:     {message}", stderr=True)


def traceback_text(frames, exception):
    """A Python-like traceback: ``frames`` are (file, line, function, source) tuples."""
    lines = ["Traceback (most recent call last):"]
    for path, lineno, function, source in frames:
        lines.append(f'  File "{path}", line {lineno}, in {function}')
        lines.append(f"    {source}")
    lines.append(exception)
    return "\n".join(lines)


class Procs:
    """The simulated processes of one rank."""

    def __init__(self, headless, worker_name):
        pid = os.getpid()
        self.api = ProcLog(None if headless else "APIServer", pid)
        self.core = self.api if headless else ProcLog("EngineCore_DP0", pid + ENGINE_PID_OFFSET)
        self.worker = ProcLog(worker_name, pid + WORKER_PID_OFFSET)
