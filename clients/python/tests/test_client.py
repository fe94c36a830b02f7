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
    MethodNotFound,
    NotFound,
    PermissionDenied,
    Sandbox,
    SandboxClosed,
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


if __name__ == "__main__":
    unittest.main()
