"""The synchronous client for `airlock rpc`."""

import base64
import json
import os
import queue
import subprocess
import sys
import threading

# One line from the server is at most a read_file of 16 MiB, or exec's two
# capped outputs, in base64: bound what we buffer.
MAX_LINE = 48 << 20
CLOSE_TIMEOUT = 20.0


class SandboxError(Exception):
    """A failed request. `code` is the JSON-RPC code, `kind` the server's
    data.kind (not_found, permission, closed, invalid_config, ...)."""

    def __init__(self, message, code=-32000, kind=""):
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind


class InvalidParams(SandboxError):
    """-32602: the config or the params are wrong."""


class MethodNotFound(SandboxError):
    """-32601: no such method."""


class ProtocolError(SandboxError):
    """-32700 / -32600: the request could not be read."""


class NotFound(SandboxError):
    """No such file or directory inside the sandbox."""


class PermissionDenied(SandboxError):
    """Not readable or writable inside the sandbox."""


class SandboxClosed(SandboxError):
    """The sandbox (or airlock rpc) has ended."""


def _error(err):
    code = err.get("code", -32000)
    msg = err.get("message", "unknown error")
    kind = (err.get("data") or {}).get("kind", "")
    if kind == "not_found":
        cls = NotFound
    elif kind == "permission":
        cls = PermissionDenied
    elif kind == "closed":
        cls = SandboxClosed
    elif code == -32602:
        cls = InvalidParams
    elif code == -32601:
        cls = MethodNotFound
    elif code in (-32700, -32600):
        cls = ProtocolError
    else:
        cls = SandboxError
    return cls(msg, code, kind)


def _b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _unb64(s):
    return base64.b64decode(s or "")


class Sandbox:
    """One sandbox behind one `airlock rpc` process.

    config is the create method's params (image, resources, network, vfs,
    env). binary defaults to $AIRLOCK_BIN, else `airlock` on PATH. Methods are
    safe to call from several threads; event handlers run on the reader
    thread, so keep them quick.
    """

    def __init__(self, config=None, binary=None, env=None, timeout=None):
        self._start(binary, env)
        try:
            self.info = self._call("create", config or {}, timeout=timeout)
        except BaseException:
            self._kill()
            raise
        self.env = self.info.get("env", {})
        self.id = self.info.get("id", "")

    def _start(self, binary, env):
        binary = binary or os.environ.get("AIRLOCK_BIN") or "airlock"
        self.proc = subprocess.Popen(
            [binary, "rpc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._id = 0
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self._pending = {}
        self._event_handlers = []
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    # --- transport -------------------------------------------------------

    def _read_loop(self):
        out = self.proc.stdout
        try:
            while True:
                line = out.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    # Oversized: skip to the end of it.
                    while line and not line.endswith(b"\n"):
                        line = out.readline(1 << 20)
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict):
                    continue
                if "id" in msg and "method" not in msg:
                    with self._lock:
                        q = self._pending.get(msg["id"])
                    if q is not None:
                        q.put(msg)
                elif msg.get("method") == "event":
                    for handler in list(self._event_handlers):
                        try:
                            handler(msg.get("params") or {})
                        except Exception as e:  # a handler's bug must not stop the session
                            print("airlock: event handler failed: %r" % (e,), file=sys.stderr)
        finally:
            self._closed.set()
            with self._lock:
                pending = list(self._pending.values())
            for q in pending:
                q.put(None)

    def _send(self, method, params):
        with self._lock:
            self._id += 1
            req_id = self._id
            q = queue.Queue()
            self._pending[req_id] = q
        line = json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": req_id})
        try:
            with self._wlock:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._done(req_id)
            raise SandboxClosed("airlock rpc has exited", kind="closed")
        return req_id, q

    def _done(self, req_id):
        with self._lock:
            self._pending.pop(req_id, None)

    def _next(self, req_id, q, timeout):
        if self._closed.is_set() and q.empty():
            raise SandboxClosed("airlock rpc has exited", kind="closed")
        try:
            msg = q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no reply from airlock rpc within %ss" % timeout)
        if msg is None:
            raise SandboxClosed("airlock rpc has exited", kind="closed")
        if "error" in msg:
            raise _error(msg["error"])
        return msg.get("result") or {}

    def _call(self, method, params=None, timeout=None):
        req_id, q = self._send(method, params if params is not None else {})
        try:
            return self._next(req_id, q, timeout)
        finally:
            self._done(req_id)

    # --- methods -----------------------------------------------------------

    def exec(self, command, working_dir=None, env=None, stdin=None, timeout_ms=None, timeout=None):
        """Run command with /bin/sh -c; returns a dict with exit_code, stdout
        and stderr (str), duration_ms (and reason when airlock ended it)."""
        params = {"command": command}
        if working_dir:
            params["working_dir"] = working_dir
        if env:
            params["env"] = env
        if stdin is not None:
            params["stdin"] = _b64(stdin)
        if timeout_ms:
            params["timeout_ms"] = timeout_ms
        r = self._call("exec", params, timeout=timeout)
        out = {
            "exit_code": r["exit_code"],
            "stdout": _unb64(r.get("stdout")).decode(errors="replace"),
            "stderr": _unb64(r.get("stderr")).decode(errors="replace"),
            "duration_ms": r.get("duration_ms", 0),
        }
        for k in ("reason", "truncated"):
            if k in r:
                out[k] = r[k]
        return out

    def exec_stream(self, command, on_stdout=None, on_stderr=None, working_dir=None, env=None, timeout_ms=None):
        """Run command, calling on_stdout/on_stderr with bytes as output
        arrives; returns {exit_code, duration_ms}."""
        params = {"command": command}
        if working_dir:
            params["working_dir"] = working_dir
        if env:
            params["env"] = env
        if timeout_ms:
            params["timeout_ms"] = timeout_ms
        req_id, q = self._send("exec_stream", params)
        try:
            while True:
                r = self._next(req_id, q, None)
                if "exit_code" in r:
                    return r
                if "stdout" in r and on_stdout:
                    on_stdout(_unb64(r["stdout"]))
                if "stderr" in r and on_stderr:
                    on_stderr(_unb64(r["stderr"]))
        finally:
            self._done(req_id)

    def write_file(self, path, content, mode=None):
        """Write str (UTF-8) or bytes to path inside; parents are made."""
        params = {"path": path, "content": _b64(content)}
        if mode is not None:
            params["mode"] = mode
        self._call("write_file", params)

    def read_file(self, path):
        """The bytes of path inside."""
        return _unb64(self._call("read_file", {"path": path}).get("content"))

    def list_files(self, path):
        """Entries of a directory: dicts with name, size, mode, is_dir."""
        return self._call("list_files", {"path": path})["files"]

    def on_event(self, handler):
        """Call handler(event) for every event notification: a dict with
        type network, file, exec, approval, or another audit kind (mcp,
        hostexec, llm, workspace, lifecycle) whose fields are in "record"."""
        self._event_handlers.append(handler)

    def on_approval(self, handler):
        """Call handler(approval) for each approval event whose phase is
        "request": a connection waiting for approve or deny (a dict with id,
        subject, host, port). A sandbox asks only when created with
        {"approvals": {"mode": "ask"}}. Each call has its own thread, so
        the handler may call approve or deny (or take its time)."""

        def on(e):
            a = e.get("approval") if e.get("type") == "approval" else None
            if a and a.get("phase") == "request":
                threading.Thread(target=handler, args=(a,), daemon=True).start()

        self._event_handlers.append(on)

    def approve(self, request_id, scope=None, wildcard=False):
        """Let approval request_id through. scope: once (the default),
        session, project or global; wildcard widens a remembered answer to
        the host's subdomains."""
        params = {"id": request_id}
        if scope:
            params["scope"] = scope
        if wildcard:
            params["wildcard"] = True
        self._call("approve", params)

    def deny(self, request_id, scope=None):
        """Refuse approval request_id (scope as for approve)."""
        params = {"id": request_id}
        if scope:
            params["scope"] = scope
        self._call("deny", params)

    # --- the manager: every sandbox in the state dir ----------------------

    def list(self):
        """Every sandbox in the state dir, running or not, whatever made it:
        dicts as airlock ls --json gives them (id, name, origin, status...)."""
        return self._call("list")["sandboxes"]

    def get(self, ref):
        """One sandbox, by id or name, as airlock get gives it."""
        return self._call("get", {"id": ref})

    def kill(self, ref):
        """Stop a running sandbox, by id or name, as airlock kill does."""
        self._call("kill", {"id": ref})

    def close(self):
        """End the sandbox and wait for airlock rpc to exit."""
        if self.proc.poll() is None:
            try:
                self._call("close", timeout=CLOSE_TIMEOUT)
            except (SandboxClosed, TimeoutError):
                pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill()
        self._reader.join(timeout=CLOSE_TIMEOUT)
        self.proc.stdout.close()

    def _kill(self):
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


class Manager(Sandbox):
    """An `airlock rpc` session with no sandbox of its own: list, get and
    kill the sandboxes in the state dir (what airlock run, agent run and
    the API made)."""

    def __init__(self, binary=None, env=None):
        self._start(binary, env)
        self.info, self.env, self.id = {}, {}, ""
