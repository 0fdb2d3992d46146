"""Two-rank rendezvous, standing in for torch.distributed + NCCL between the DGX Sparks.

Protocol: newline-delimited JSON objects over one TCP connection per worker.

1. The head (rank 0) listens on all interfaces at ``--master-port`` (as torch's TCPStore
   server does); a headless worker connects to ``--master-addr:--master-port``, retrying until
   the join timeout.
2. The worker sends ``{"type": "hello", "rank": r, "fingerprint": {...}}``; the head answers
   ``{"type": "welcome"}`` or ``{"type": "reject", "reason": ...}``.  A fingerprint mismatch
   (version, nnodes, world size, tp, pp, max_model_len, kv dtype, speculative and compilation
   config) is fatal for both ranks; a second worker claiming a joined rank is only rejected.
3. After the join both sides send ``{"type": "heartbeat"}`` every interval; EOF or a send error
   means the peer is lost, and so does silence longer than the heartbeat timeout when one is set
   (opt-in: by default a silent peer is only *stalled*, see :meth:`PeerLink.silent_for`, as a wedged
   NCCL peer is to vLLM).  Other messages: ``ready`` (worker finished start-up), ``replay`` (first
   served request), ``step`` (the head starts generation request ``id``; the worker answers
   ``step_done`` with the same ``id``), ``error`` (peer failed; carries ``message``) and
   ``shutdown`` (orderly head shutdown).
"""
import json
import select
import socket
import threading
import time

MAX_LINE = 1 << 20
HANDSHAKE_TIMEOUT_S = 30.0
RETRY_S = 0.2


class JoinError(Exception):
    """Rendezvous failure; the message is the exception line of the real stack."""


class Channel:
    """Thread-safe sender / single-reader receiver of JSON lines on a connected socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.send_lock = threading.Lock()

    def send(self, obj):
        data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        with self.send_lock:
            self.sock.sendall(data)

    def recv(self, timeout):
        """The next message, None after ``timeout`` seconds; EOFError / ValueError on failure."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _unused, _unused = select.select([self.sock], [], [], remaining)
            if not readable:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed by peer")
            self.buf += chunk
            if len(self.buf) > MAX_LINE:
                raise ValueError("protocol line too long")
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise ValueError(f"bad protocol message {line[:80]!r}")
        return msg

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class PeerLink:
    """A joined peer: heartbeat sender and receiver threads, callbacks for messages and loss."""

    def __init__(self, channel, peer_rank, interval, timeout, on_message, on_lost):
        self.channel, self.peer_rank = channel, peer_rank
        self.interval, self.timeout = interval, timeout
        self.on_message, self.on_lost = on_message, on_lost
        self.closing = False
        self.draining = False
        self.frozen = False  # a stalled rank: sends nothing more (its process lives on)
        self.last_heard = time.monotonic()
        self.acked = 0  # the last generation step the peer answered
        self._lost = False
        self._lock = threading.Lock()
        self._ended = threading.Event()

    def start(self):
        for target, name in ((self._receive, "rx"), (self._heartbeat, "hb")):
            threading.Thread(target=target, name=f"peer{self.peer_rank}-{name}", daemon=True).start()

    def silent_for(self):
        """Seconds since anything was last heard from the peer."""
        return time.monotonic() - self.last_heard

    def send(self, obj):
        if self.frozen:
            return
        try:
            self.channel.send(obj)
        except OSError as exc:
            self._lose(f"send failed: {exc}")

    def close(self):
        self.closing = True
        self.channel.close()

    def finish(self):
        """Close the sending side after the last message; the receiver keeps reading (and dropping)
        what the peer still sends until it closes too (:meth:`wait_ended`). A socket closed with
        unread data is reset, and a reset can destroy the last message before the peer reads it
        (the "error" a failing head sends its worker)."""
        self.draining = True
        try:
            self.channel.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._ended.set()

    def wait_ended(self, timeout):
        return self._ended.wait(timeout)

    def _lose(self, reason):
        with self._lock:
            if self.closing or self.draining or self._lost or self.frozen:
                return
            self._lost = True
        self.on_lost(self, reason)

    def _receive(self):
        try:
            self._receive_loop()
        finally:
            self._ended.set()

    def _receive_loop(self):
        last = time.monotonic()
        while not self.closing:
            try:
                msg = self.channel.recv(self.interval)
            except (EOFError, OSError, ValueError) as exc:
                self._lose(f"connection lost ({exc})")
                return
            now = time.monotonic()
            if msg is None:
                if self.timeout and now - last > self.timeout:
                    self._lose(f"no heartbeat for {now - last:.1f} s")
                    return
                continue
            last = self.last_heard = now
            if msg["type"] != "heartbeat" and not (self.draining or self.frozen):
                self.on_message(self, msg)

    def _heartbeat(self):
        while not (self.closing or self.draining or self.frozen):
            self.send({"type": "heartbeat"})
            time.sleep(self.interval)


def _listen(port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", port))
    except OSError as exc:
        listener.close()
        raise JoinError(f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                        f"network address. port: {port}, useIpv6: 0, code: {-exc.errno}, message: {exc.strerror}") \
            from None
    listener.listen(16)
    listener.settimeout(0.2)
    return listener


def _fingerprint_diff(head, worker):
    keys = sorted(set(head) | set(worker))
    return [f"{k}: head={head.get(k)!r} worker={worker.get(k)!r}" for k in keys if head.get(k) != worker.get(k)]


def accept_workers(cfg, log, lifecycle, timeout_s):
    """Head side: wait for ranks 1..nnodes-1; returns {rank: Channel}. Raises JoinError."""
    listener = _listen(cfg.master_port)
    expected = cfg.fingerprint()
    joined = {}
    start = time.monotonic()
    next_note = start
    try:
        while len(joined) < cfg.nnodes - 1:
            lifecycle.check()
            now = time.monotonic()
            if now - start > timeout_s:
                raise JoinError(f"torch.distributed.DistStoreError: Timed out after {timeout_s:g} seconds waiting "
                                f"for clients. {len(joined) + 1}/{cfg.nnodes} clients joined.")
            if now >= next_note:
                log.info("multiproc_executor.py:131",
                         f"Waiting for {cfg.nnodes - 1 - len(joined)} remote node(s) to join the torch.distributed "
                         f"process group at tcp://{cfg.master_addr}:{cfg.master_port} (timeout {timeout_s:g} s)")
                next_note = now + 30
            try:
                conn, addr = listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(None)
            channel = Channel(conn)
            try:
                hello = channel.recv(5.0)
            except (EOFError, OSError, ValueError):
                hello = None
            if not hello or hello.get("type") != "hello" or not isinstance(hello.get("fingerprint"), dict):
                channel.close()
                continue
            rank = hello.get("rank")
            if rank in joined:
                channel.send({"type": "reject", "reason": f"node rank {rank} has already joined"})
                channel.close()
                log.warning("multiproc_executor.py:150", f"Rejected a second node claiming rank {rank} from {addr[0]}")
                continue
            problems = _fingerprint_diff(expected, hello["fingerprint"])
            if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank < cfg.nnodes:
                problems.insert(0, f"node rank {rank!r} is outside 1..{cfg.nnodes - 1}")
            if problems:
                reason = f"configuration mismatch between head (rank 0) and node rank {rank}: " + "; ".join(problems)
                channel.send({"type": "reject", "reason": reason, "fatal": True})
                channel.close()
                raise JoinError(f"RuntimeError: {reason}")
            channel.send({"type": "welcome"})
            joined[rank] = channel
            log.info("multiproc_executor.py:160", f"Node rank {rank} joined from {addr[0]}:{addr[1]} "
                                                  f"(world_size={cfg.world_size})")
    except BaseException:
        for channel in joined.values():
            channel.close()
        raise
    finally:
        listener.close()
    return joined


def connect_to_head(cfg, log, lifecycle, timeout_s):
    """Worker side: connect, handshake and return the Channel. Raises JoinError."""
    start = time.monotonic()
    next_note = start
    while True:
        lifecycle.check()
        try:
            sock = socket.create_connection((cfg.master_addr, cfg.master_port), timeout=1.0)
            break
        except OSError as exc:
            now = time.monotonic()
            if now - start > timeout_s:
                raise JoinError(f"torch.distributed.DistNetworkError: The client socket has timed out after "
                                f"{timeout_s:g}s while trying to connect to ({cfg.master_addr}, "
                                f"{cfg.master_port}).") from None
            if now >= next_note:
                log.info("tcp_store.py:84", f"Waiting for the head node at {cfg.master_addr}:{cfg.master_port} "
                                            f"({exc.strerror or exc})")
                next_note = now + 10
            lifecycle.sleep(RETRY_S)
    sock.settimeout(None)
    channel = Channel(sock)
    try:
        channel.send({"type": "hello", "rank": cfg.node_rank, "fingerprint": cfg.fingerprint()})
        answer = channel.recv(HANDSHAKE_TIMEOUT_S)
    except (EOFError, OSError, ValueError) as exc:
        channel.close()
        raise JoinError(f"torch.distributed.DistNetworkError: connection to the head node "
                        f"{cfg.master_addr}:{cfg.master_port} failed during the handshake ({exc})") from None
    if answer is None or answer.get("type") != "welcome":
        channel.close()
        reason = (answer or {}).get("reason", "no answer to the handshake")
        raise JoinError(f"RuntimeError: the head node rejected node rank {cfg.node_rank}: {reason}")
    return channel
