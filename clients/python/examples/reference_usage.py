# ADR-0001's Python usage example, verbatim, with this package's client.
import os

from airlock import Sandbox

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
