// Type-checks index.d.ts against how the client is used (tsc --noEmit).
import { Sandbox, SandboxError, type Event } from '../index.js';

async function use(): Promise<void> {
  const sb = await Sandbox.create({ network: { allowed_hosts: ['example.com'], tunnel_hosts: ['dl.example.com'] }, vfs: { mounts: { '/workspace': { type: 'memory' } } } });
  sb.onEvent((e: Event) => {
    if (e.type === 'network') console.log(e.network.url, e.network.blocked);
    if (e.type === 'file') console.log(e.file.op, e.file.path);
  });
  const r = await sb.exec('true', '/workspace', { timeoutMs: 1000 });
  const n: number = r.exit_code;
  const b: Buffer = await sb.readFile('/x');
  await sb.execStream('ls', (stream, data) => console.log(stream, data.length));
  try {
    await sb.listFiles('/');
  } catch (e) {
    if (e instanceof SandboxError) console.log(e.kind, e.code, n, b);
  }
  await sb.close();
}
void use;
