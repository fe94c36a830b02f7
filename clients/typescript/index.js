// @ts-check
/**
 * Client for `airlock rpc`: run commands in an airlock sandbox from Node.js
 * (>= 20). JSON-RPC 2.0 over the subprocess's stdin and stdout, one message
 * per line. No runtime dependencies; types in index.d.ts.
 *
 *   import { Sandbox } from '@airlock/sandbox';
 *   const sb = await Sandbox.create({ env: { GREETING: 'hi' } });
 *   console.log((await sb.exec('echo $GREETING')).stdout);
 *   await sb.close();
 */
import { spawn } from 'node:child_process';

/** One line from the server is at most a 16 MiB file or exec's capped output, in base64. */
export const MAX_LINE = 48 << 20;
const CLOSE_TIMEOUT_MS = 20_000;

/** A failed request: code is the JSON-RPC code, kind the server's data.kind. */
export class SandboxError extends Error {
  /** @param {string} message @param {number} code @param {string} kind */
  constructor(message, code = -32000, kind = '') {
    super(message);
    this.name = 'SandboxError';
    this.code = code;
    this.kind = kind;
  }
}

/** @param {{code?: number, message?: string, data?: {kind?: string}}} e */
function toError(e) {
  const code = e.code ?? -32000;
  let kind = e.data?.kind ?? '';
  if (!kind) {
    if (code === -32602) kind = 'invalid_params';
    else if (code === -32601) kind = 'method_not_found';
    else if (code === -32700 || code === -32600) kind = 'protocol';
  }
  return new SandboxError(e.message ?? 'unknown error', code, kind);
}

const closedError = () => new SandboxError('airlock rpc has exited', -32000, 'closed');

/** @param {string | Uint8Array} data */
const b64 = (data) => Buffer.from(typeof data === 'string' ? Buffer.from(data) : data).toString('base64');

export class Sandbox {
  /** @private */
  constructor(binary, options) {
    /** @type {import('node:child_process').ChildProcessWithoutNullStreams} */
    this.proc = spawn(binary, ['rpc'], { stdio: ['pipe', 'pipe', 'inherit'], env: options.env ?? process.env });
    this.nextId = 0;
    /** @type {Map<number, {resolve: Function, reject: Function, partial?: Function}>} */
    this.pending = new Map();
    /** @type {Function[]} */
    this.eventHandlers = [];
    this.exited = false;
    this.info = /** @type {any} */ (null);
    this.exitPromise = new Promise((resolve) => {
      this.proc.on('close', () => {
        this.exited = true;
        for (const p of this.pending.values()) p.reject(closedError());
        this.pending.clear();
        resolve(undefined);
      });
    });
    this.proc.on('error', (err) => {
      for (const p of this.pending.values()) p.reject(new SandboxError(`start ${binary}: ${err.message}`, -32000, 'start_failed'));
      this.pending.clear();
    });
    this.proc.stdin.on('error', () => {}); // a dead server shows as 'close'
    this.readLines();
  }

  /**
   * Start `airlock rpc` and a sandbox in it.
   * @param {object} [config] create's params: image, resources, network, vfs, env
   * @param {{binary?: string, env?: NodeJS.ProcessEnv}} [options]
   */
  static async create(config = {}, options = {}) {
    const binary = options.binary ?? process.env.AIRLOCK_BIN ?? 'airlock';
    const sb = new Sandbox(binary, options);
    try {
      sb.info = await sb.call('create', config);
    } catch (err) {
      sb.proc.kill('SIGKILL');
      await sb.exitPromise;
      throw err;
    }
    return sb;
  }

  /**
   * Start `airlock rpc` with no sandbox of its own: list, get and kill the
   * sandboxes in the state dir.
   * @param {{binary?: string, env?: NodeJS.ProcessEnv}} [options]
   */
  static async manage(options = {}) {
    return new Sandbox(options.binary ?? process.env.AIRLOCK_BIN ?? 'airlock', options);
  }

  /** Every sandbox in the state dir, as airlock ls --json gives them. */
  async list() {
    return (await this.call('list')).sandboxes;
  }

  /** One sandbox, by id or name, as airlock get gives it. @param {string} ref */
  async get(ref) {
    return this.call('get', { id: ref });
  }

  /** Stop a running sandbox, by id or name, as airlock kill does. @param {string} ref */
  async kill(ref) {
    await this.call('kill', { id: ref });
  }

  /** @private */
  readLines() {
    /** @type {Buffer[]} */
    let parts = [];
    let size = 0;
    let skipping = false;
    this.proc.stdout.on('data', (/** @type {Buffer} */ chunk) => {
      let start = 0;
      for (let nl = chunk.indexOf(10, start); nl !== -1; nl = chunk.indexOf(10, start)) {
        const piece = chunk.subarray(start, nl);
        start = nl + 1;
        if (skipping || size + piece.length > MAX_LINE) {
          parts = []; size = 0; skipping = false;
          continue;
        }
        parts.push(piece);
        const line = Buffer.concat(parts).toString('utf8');
        parts = []; size = 0;
        this.dispatch(line);
      }
      const rest = chunk.subarray(start);
      if (rest.length) {
        if (size + rest.length > MAX_LINE) { parts = []; size = 0; skipping = true; }
        else if (!skipping) { parts.push(rest); size += rest.length; }
      }
    });
  }

  /** @private @param {string} line */
  dispatch(line) {
    let msg;
    try { msg = JSON.parse(line); } catch { return; }
    if (msg === null || typeof msg !== 'object') return;
    if (msg.id !== undefined && msg.method === undefined) {
      const p = this.pending.get(msg.id);
      if (!p) return;
      if (msg.error) {
        this.pending.delete(msg.id);
        p.reject(toError(msg.error));
      } else if (p.partial && msg.result && msg.result.exit_code === undefined) {
        p.partial(msg.result);
      } else {
        this.pending.delete(msg.id);
        p.resolve(msg.result ?? {});
      }
    } else if (msg.method === 'event') {
      for (const h of this.eventHandlers) {
        try { h(msg.params); } catch (err) { console.error('airlock: event handler failed:', err); }
      }
    }
  }

  /**
   * Send one request. partial receives exec_stream's chunks.
   * @param {string} method @param {object} [params] @param {Function} [partial]
   * @returns {Promise<any>}
   */
  call(method, params = {}, partial) {
    return new Promise((resolve, reject) => {
      if (this.exited) return reject(closedError());
      const id = ++this.nextId;
      this.pending.set(id, { resolve, reject, partial });
      this.proc.stdin.write(JSON.stringify({ jsonrpc: '2.0', method, params, id }) + '\n');
    });
  }

  /** The sandbox's id. */
  get id() { return this.info?.id ?? ''; }

  /** The environment every command sees (secrets as placeholders). */
  get env() { return this.info?.env ?? {}; }

  /**
   * Run command with /bin/sh -c. stdout and stderr are decoded as UTF-8.
   * @param {string} command @param {string} [workingDir]
   * @param {{env?: Record<string,string>, stdin?: string|Uint8Array, timeoutMs?: number}} [opts]
   */
  async exec(command, workingDir, opts = {}) {
    const r = await this.call('exec', execParams(command, workingDir, opts));
    const out = {
      exit_code: r.exit_code,
      stdout: Buffer.from(r.stdout || '', 'base64').toString(),
      stderr: Buffer.from(r.stderr || '', 'base64').toString(),
      duration_ms: r.duration_ms || 0,
    };
    if (r.reason) out.reason = r.reason;
    if (r.truncated) out.truncated = true;
    return out;
  }

  /**
   * Run command, calling onOutput(stream, bytes) as output arrives.
   * @param {string} command
   * @param {(stream: 'stdout'|'stderr', data: Buffer) => void} onOutput
   * @param {string} [workingDir]
   * @param {{env?: Record<string,string>, stdin?: string|Uint8Array, timeoutMs?: number}} [opts]
   */
  async execStream(command, onOutput, workingDir, opts = {}) {
    return this.call('exec_stream', execParams(command, workingDir, opts), (/** @type {any} */ r) => {
      if (r.stdout) onOutput('stdout', Buffer.from(r.stdout, 'base64'));
      if (r.stderr) onOutput('stderr', Buffer.from(r.stderr, 'base64'));
    });
  }

  /** @param {string} path @param {string|Uint8Array} content @param {number} [mode] */
  async writeFile(path, content, mode) {
    const params = { path, content: b64(content) };
    if (mode !== undefined) params.mode = mode;
    await this.call('write_file', params);
  }

  /** @param {string} path @returns {Promise<Buffer>} */
  async readFile(path) {
    const r = await this.call('read_file', { path });
    return Buffer.from(r.content || '', 'base64');
  }

  /** @param {string} path */
  async listFiles(path) {
    return (await this.call('list_files', { path })).files;
  }

  /**
   * Call handler for every event: type network, file, exec, approval, or
   * another audit kind (mcp, hostexec, llm, workspace, lifecycle) whose
   * fields are in record.
   */
  onEvent(handler) {
    this.eventHandlers.push(handler);
  }

  /**
   * Call handler for each approval request: a connection waiting for
   * approve or deny (a sandbox created with approvals: { mode: 'ask' }).
   * @param {(approval: any) => void} handler
   */
  onApproval(handler) {
    this.eventHandlers.push((/** @type {any} */ e) => {
      if (e?.type === 'approval' && e.approval?.phase === 'request') handler(e.approval);
    });
  }

  /**
   * Let approval request id through; scope once (the default), session,
   * project or global; wildcard widens a remembered answer to subdomains.
   * @param {string} id @param {{scope?: string, wildcard?: boolean}} [opts]
   */
  async approve(id, opts = {}) {
    await this.call('approve', decision(id, opts));
  }

  /** Refuse approval request id. @param {string} id @param {{scope?: string}} [opts] */
  async deny(id, opts = {}) {
    await this.call('deny', decision(id, opts));
  }

  /** End the sandbox and wait for airlock rpc to exit. */
  async close() {
    if (!this.exited) {
      const timer = setTimeout(() => this.proc.kill('SIGKILL'), CLOSE_TIMEOUT_MS);
      try { await this.call('close'); } catch (err) { if (!(err instanceof SandboxError && err.kind === 'closed')) throw err; }
      this.proc.stdin.end();
      await this.exitPromise;
      clearTimeout(timer);
    }
  }
}

/** @param {string} id @param {{scope?: string, wildcard?: boolean}} opts */
function decision(id, opts) {
  /** @type {any} */
  const p = { id };
  if (opts.scope) p.scope = opts.scope;
  if (opts.wildcard) p.wildcard = true;
  return p;
}

function execParams(command, workingDir, opts) {
  /** @type {any} */
  const p = { command };
  if (workingDir) p.working_dir = workingDir;
  if (opts.env) p.env = opts.env;
  if (opts.stdin !== undefined) p.stdin = b64(opts.stdin);
  if (opts.timeoutMs) p.timeout_ms = opts.timeoutMs;
  return p;
}
