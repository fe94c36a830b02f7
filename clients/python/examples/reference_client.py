# ADR-0001's Python client and its usage example, verbatim (only `import os`,
# which the example uses, is added). It spawns `sandbox --rpc`: the test puts
# a `sandbox` link to airlock on PATH, so this runs against `airlock --rpc`.
import os
import subprocess
import json
import base64
import threading

class Sandbox:
    def __init__(self, config=None):
        self.proc = subprocess.Popen(
            ['sandbox', '--rpc'],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=1,  # Line buffered
        )
        self._id = 0
        self._lock = threading.Lock()
        self._event_handlers = []
        
        # Start event reader thread
        self._reader_thread = threading.Thread(target=self._read_loop, daemon=True)
        self._pending = {}
        self._reader_thread.start()
        
        # Initialize VM
        self._call('create', config or {})
    
    def _read_loop(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            if 'id' in msg:
                # Response to a request
                with self._lock:
                    if msg['id'] in self._pending:
                        self._pending[msg['id']].append(msg)
            elif msg.get('method') == 'event':
                # Event notification
                for handler in self._event_handlers:
                    handler(msg['params'])
    
    def _call(self, method, params=None):
        with self._lock:
            self._id += 1
            req_id = self._id
            self._pending[req_id] = []
        
        request = {'jsonrpc': '2.0', 'method': method, 'params': params or {}, 'id': req_id}
        self.proc.stdin.write(json.dumps(request).encode() + b'\n')
        self.proc.stdin.flush()
        
        # Wait for response
        while True:
            with self._lock:
                if self._pending[req_id]:
                    response = self._pending[req_id].pop(0)
                    if 'error' in response:
                        raise Exception(response['error']['message'])
                    return response.get('result')
    
    def exec(self, command, working_dir=None):
        result = self._call('exec', {'command': command, 'working_dir': working_dir})
        return {
            'exit_code': result['exit_code'],
            'stdout': base64.b64decode(result.get('stdout', '')).decode(),
            'stderr': base64.b64decode(result.get('stderr', '')).decode(),
            'duration_ms': result.get('duration_ms', 0),
        }
    
    def write_file(self, path, content):
        if isinstance(content, str):
            content = content.encode()
        self._call('write_file', {
            'path': path,
            'content': base64.b64encode(content).decode(),
        })
    
    def read_file(self, path):
        result = self._call('read_file', {'path': path})
        return base64.b64decode(result['content'])
    
    def list_files(self, path):
        result = self._call('list_files', {'path': path})
        return result['files']
    
    def on_event(self, handler):
        self._event_handlers.append(handler)
    
    def close(self):
        self._call('close')
        self.proc.wait()
    
    def __enter__(self):
        return self
    
    def __exit__(self, *args):
        self.close()


# Usage
with Sandbox({
    'image': 'standard',
    'network': {
        'allowed_hosts': ['api.openai.com'],
        'secrets': {
            'OPENAI_API_KEY': {
                'value': os.environ['OPENAI_API_KEY'],
                'hosts': ['api.openai.com'],
            }
        }
    },
    'vfs': {
        'mounts': {
            '/workspace': {'type': 'memory'}
        }
    },
    'env': {'OPENAI_API_KEY': '${OPENAI_API_KEY}'}
}) as sb:
    
    # Handle events
    sb.on_event(lambda e: print(f"Event: {e['type']}") if e['type'] == 'network' else None)
    
    # Write and execute
    sb.write_file('/workspace/hello.py', 'print("Hello from sandbox!")')
    result = sb.exec('python /workspace/hello.py')
    print(result['stdout'])  # "Hello from sandbox!"
    
    # Read output
    sb.write_file('/workspace/script.py', '''
import json
with open('/workspace/output.json', 'w') as f:
    json.dump({"status": "ok"}, f)
''')
    sb.exec('python /workspace/script.py')
    output = sb.read_file('/workspace/output.json')
    print(output)  # b'{"status": "ok"}'
