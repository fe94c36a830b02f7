// ADR-0001's TypeScript client and usage example, verbatim. It spawns
// `sandbox --rpc`: the test puts a `sandbox` link to airlock on PATH.
import { spawn, ChildProcess } from 'child_process';
import * as readline from 'readline';

interface Config {
  image?: string;
  resources?: { cpus?: number; memory_mb?: number; timeout_seconds?: number };
  network?: {
    allowed_hosts?: string[];
    secrets?: Record<string, { value: string; hosts: string[] }>;
  };
  vfs?: {
    mounts?: Record<string, { type: string; host_path?: string; readonly?: boolean }>;
  };
  env?: Record<string, string>;
}

interface ExecResult {
  exit_code: number;
  stdout: string;
  stderr: string;
  duration_ms: number;
}

type Event = { type: 'network'; network: NetworkEvent } | { type: 'file'; file: FileEvent };
type NetworkEvent = { method: string; url: string; status_code: number; blocked: boolean };
type FileEvent = { op: string; path: string; size: number };

class Sandbox {
  private proc: ChildProcess;
  private rl: readline.Interface;
  private nextId = 0;
  private pending = new Map<number, { resolve: Function; reject: Function }>();
  private eventHandlers: ((event: Event) => void)[] = [];

  private constructor() {}

  static async create(config: Config = {}): Promise<Sandbox> {
    const sb = new Sandbox();
    await sb.init(config);
    return sb;
  }

  private async init(config: Config) {
    this.proc = spawn('sandbox', ['--rpc'], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.rl = readline.createInterface({ input: this.proc.stdout! });

    this.rl.on('line', (line) => {
      const msg = JSON.parse(line);
      if (msg.id !== undefined && this.pending.has(msg.id)) {
        const { resolve, reject } = this.pending.get(msg.id)!;
        this.pending.delete(msg.id);
        if (msg.error) {
          reject(new Error(msg.error.message));
        } else {
          resolve(msg.result);
        }
      } else if (msg.method === 'event') {
        this.eventHandlers.forEach((h) => h(msg.params));
      }
    });

    await this.call('create', config);
  }

  private call<T>(method: string, params?: any): Promise<T> {
    return new Promise((resolve, reject) => {
      const id = ++this.nextId;
      this.pending.set(id, { resolve, reject });
      const request = JSON.stringify({ jsonrpc: '2.0', method, params: params || {}, id });
      this.proc.stdin!.write(request + '\n');
    });
  }

  async exec(command: string, workingDir?: string): Promise<ExecResult> {
    const result = await this.call<any>('exec', { command, working_dir: workingDir });
    return {
      exit_code: result.exit_code,
      stdout: Buffer.from(result.stdout || '', 'base64').toString(),
      stderr: Buffer.from(result.stderr || '', 'base64').toString(),
      duration_ms: result.duration_ms || 0,
    };
  }

  async writeFile(path: string, content: string | Buffer): Promise<void> {
    const data = typeof content === 'string' ? Buffer.from(content) : content;
    await this.call('write_file', { path, content: data.toString('base64') });
  }

  async readFile(path: string): Promise<Buffer> {
    const result = await this.call<{ content: string }>('read_file', { path });
    return Buffer.from(result.content, 'base64');
  }

  async listFiles(path: string): Promise<{ name: string; size: number; is_dir: boolean }[]> {
    const result = await this.call<{ files: any[] }>('list_files', { path });
    return result.files;
  }

  onEvent(handler: (event: Event) => void) {
    this.eventHandlers.push(handler);
  }

  async close(): Promise<void> {
    await this.call('close');
    this.proc.kill();
  }
}

// Usage
async function main() {
  const sb = await Sandbox.create({
    image: 'standard',
    network: {
      allowed_hosts: ['api.openai.com'],
      secrets: {
        OPENAI_API_KEY: { value: process.env.OPENAI_API_KEY!, hosts: ['api.openai.com'] },
      },
    },
    vfs: {
      mounts: { '/workspace': { type: 'memory' } },
    },
    env: { OPENAI_API_KEY: '${OPENAI_API_KEY}' },
  });

  sb.onEvent((event) => {
    if (event.type === 'network') {
      console.log(`HTTP: ${event.network.method} ${event.network.url} -> ${event.network.status_code}`);
    }
  });

  await sb.writeFile('/workspace/hello.py', 'print("Hello from sandbox!")');
  const result = await sb.exec('python /workspace/hello.py');
  console.log(result.stdout); // "Hello from sandbox!"

  await sb.close();
}

main();
