"""airlock: run commands in a sandbox from Python.

A thin client for `airlock rpc` (JSON-RPC 2.0 over the subprocess's stdin and
stdout, one message per line). Standard library only.

    from airlock import Sandbox

    with Sandbox({'env': {'GREETING': 'hi'}}) as sb:
        sb.write_file('/workspace/hello.py', 'print("hello")')
        print(sb.exec('python /workspace/hello.py')['stdout'])
"""

from .client import (
    Sandbox,
    Manager,
    SandboxError,
    InvalidParams,
    MethodNotFound,
    ProtocolError,
    NotFound,
    PermissionDenied,
    SandboxClosed,
)

__all__ = [
    "Sandbox",
    "Manager",
    "SandboxError",
    "InvalidParams",
    "MethodNotFound",
    "ProtocolError",
    "NotFound",
    "PermissionDenied",
    "SandboxClosed",
]
