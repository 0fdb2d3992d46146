"""Process lifecycle: one pending exit request, polled by the main thread.

Signal handlers and background threads only *request* an exit (a lock-free attribute
assignment); the main thread notices it within 50 ms in ``sleep``/``check`` and performs the
exit, so no lock is ever taken inside a signal handler.
"""
import time

POLL_S = 0.05


class ExitRequested(Exception):
    def __init__(self, code, reason):
        super().__init__(reason)
        self.code, self.reason = code, reason


class Lifecycle:
    def __init__(self):
        self.pending = None          # (code, reason) of the first exit request

    def request_exit(self, code, reason):
        if self.pending is None:
            self.pending = (code, reason)

    def on_signal(self, signum, _frame):
        self.request_exit(0, f"signal {signum}")

    def check(self):
        if self.pending is not None:
            raise ExitRequested(*self.pending)

    def sleep(self, seconds):
        """Sleep ``seconds`` (may be inf), raising ExitRequested as soon as an exit is pending."""
        deadline = time.monotonic() + seconds
        while True:
            self.check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(POLL_S, remaining))
