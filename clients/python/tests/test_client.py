"""Every method of the client against the real `airlock rpc`.

Run: AIRLOCK_BIN=/path/to/airlock python3 -m unittest discover -s tests
(Go's cmd/airlock e2e suite runs it with the binary it builds.)
"""

import os
import shutil
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from airlock import (  # noqa: E402
    InvalidParams,
    Manager,
    MethodNotFound,
    NotFound,
    PermissionDenied,
    Sandbox,
    SandboxClosed,
    SandboxError,
)

BIN = os.environ.get("AIRLOCK_BIN") or shutil.which("airlock")


@unittest.skipUnless(BIN, "set AIRLOCK_BIN to an airlock binary")
class ClientTest(unittest.TestCase):
    def test_every_method(self):
        events = []
        lock = threading.Lock()
        with Sandbox({"env": {"GREETING": "hi"}, "resources": {"memory_mb": 512}}, binary=BIN) as sb:
            sb.on_event(lambda e: (lock.acquire(), events.append(e), lock.release()))
            self.assertEqual(sb.env["GREETING"], "hi")

            r = sb.exec("echo $GREETING; pwd; echo err >&2; exit 4")
            self.assertEqual(r["exit_code"], 4)
            self.assertEqual(r["stdout"], "hi\n/workspace\n")
            self.assertEqual(r["stderr"], "err\n")

            r = sb.exec("cat", stdin=b"fed in")
            self.assertEqual(r["stdout"], "fed in")

            out, err = [], []
            r = sb.exec_stream("echo a; sleep 0.05; echo b; echo c >&2", on_stdout=out.append, on_stderr=err.append)
            self.assertEqual(r["exit_code"], 0)
            self.assertEqual(b"".join(out), b"a\nb\n")
            self.assertEqual(b"".join(err), b"c\n")

            data = bytes(range(256)) * 64
            sb.write_file("/workspace/d/bin.dat", data, mode=0o600)
            self.assertEqual(sb.read_file("/workspace/d/bin.dat"), data)
            files = sb.list_files("/workspace/d")
            self.assertEqual([(f["name"], f["size"], f["mode"], f["is_dir"]) for f in files],
                             [("bin.dat", len(data), 0o600, False)])

            with self.assertRaises(NotFound):
                sb.read_file("/workspace/missing")
            with self.assertRaises(PermissionDenied):
                sb.write_file("/etc/passwd", "x")
            with self.assertRaises(MethodNotFound):
                sb._call("format_disk")
            with self.assertRaises(InvalidParams):
                sb._call("exec", {"command": 5})

            r = sb.exec("timeout_test=1; sleep 5", timeout_ms=200)
            self.assertNotEqual(r["exit_code"], 0)

            sb.exec("rm d/bin.dat")
            deadline = time.time() + 5
            while time.time() < deadline:
                with lock:
                    if any(e.get("type") == "file" and e["file"]["op"] == "delete" for e in events):
                        break
                time.sleep(0.05)
            with lock:
                kinds = {(e["type"], (e.get("file") or {}).get("op")) for e in events}
            self.assertIn(("file", "write"), kinds)
            self.assertIn(("file", "delete"), kinds)
            self.assertIn(("exec", None), kinds)
        self.assertIsNotNone(sb.proc.returncode)
        with self.assertRaises(SandboxClosed):
            sb.exec("true")

    def test_concurrent_calls(self):
        with Sandbox(binary=BIN) as sb:
            results = {}

            def run(i):
                results[i] = sb.exec("echo %d" % i)["stdout"]

            threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(results, {i: "%d\n" % i for i in range(8)})

    def test_bad_config_is_invalid_params(self):
        with self.assertRaises(InvalidParams) as cm:
            Sandbox({"vfs": {"mounts": {"/data": {"type": "s3"}}}}, binary=BIN)
        self.assertEqual(cm.exception.kind, "invalid_config")
        tunnel = {"tunnel_hosts": ["api.x.test"], "secrets": {"K": {"value": "abcdefgh", "hosts": ["api.x.test"]}}}
        with self.assertRaises(InvalidParams) as cm:
            Sandbox({"network": tunnel}, binary=BIN)
        self.assertIn("a tunnel cannot swap secrets in", str(cm.exception))


    def test_manager_lists_gets_and_kills(self):
        sb = Sandbox(binary=BIN)
        try:
            with Manager(binary=BIN) as m:
                listed = {e["id"]: e for e in m.list()}
                self.assertIn(sb.id, listed)
                self.assertEqual(listed[sb.id]["status"]["state"], "running")
                self.assertEqual(listed[sb.id]["origin"], "rpc")
                self.assertEqual(m.get(sb.id)["id"], sb.id)
                with self.assertRaises(NotFound):
                    m.get("no-such-sandbox")
                m.kill(sb.id)
                # Gone from the state dir (nothing left to review), or stopped.
                try:
                    self.assertNotEqual(m.get(sb.id)["status"]["state"], "running")
                except NotFound:
                    pass
            with self.assertRaises(SandboxClosed):
                sb.exec("true", timeout=20)
        finally:
            sb.close()


UPSTREAM = os.environ.get("AIRLOCK_TEST_UPSTREAM")  # host:port of an HTTPS server on loopback


def _ask_config():
    ip = UPSTREAM.rsplit(":", 1)[0]
    return {
        "approvals": {"mode": "ask", "timeout_seconds": 60},
        "network": {"add_hosts": ["example.com:" + ip], "upstream_ca": os.environ["AIRLOCK_TEST_UPSTREAM_CA"]},
    }


def _logged(path):
    with open(os.environ["AIRLOCK_TEST_UPSTREAM_LOG"]) as f:
        return path in f.read()


@unittest.skipUnless(BIN and UPSTREAM, "set AIRLOCK_BIN and AIRLOCK_TEST_UPSTREAM(_CA, _LOG) (the Go suite does)")
class ApprovalTest(unittest.TestCase):
    def test_approve_lets_the_request_through(self):
        path = "/py-approved-%d" % os.getpid()
        with Sandbox(_ask_config(), binary=BIN) as sb:
            asked, resolved = [], []
            sb.on_approval(lambda a: (asked.append(a), sb.approve(a["id"])) if a["subject"] == "example.com" else None)
            sb.on_event(lambda e: resolved.append(e["approval"]) if e.get("type") == "approval" and e["approval"]["phase"] == "resolved" else None)
            r = sb.exec("curl -sS --max-time 30 https://example.com" + path)
            self.assertEqual(r["exit_code"], 0, r)
            self.assertEqual([a["subject"] for a in asked], ["example.com"])
            deadline = time.time() + 5
            while not resolved and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual([(a["decision"], a["by"]) for a in resolved], [("allow", "rpc")])
        self.assertTrue(_logged(path), "the upstream's log lacks " + path)

    def test_deny_refuses_it(self):
        path = "/py-denied-%d" % os.getpid()
        with Sandbox(_ask_config(), binary=BIN) as sb:
            sb.on_approval(lambda a: sb.deny(a["id"]))
            r = sb.exec("curl -sS --max-time 30 https://example.com" + path)
            self.assertNotEqual(r["exit_code"], 0, r)
            with self.assertRaises(SandboxError):  # no such request
                sb.approve("no-such-request")
        self.assertFalse(_logged(path), "a denied request reached the upstream: " + path)


if __name__ == "__main__":
    unittest.main()
