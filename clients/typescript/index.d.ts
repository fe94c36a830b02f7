/** create's params: the sandbox's shape (see ADR-0001 "RPC Methods"). */
export interface Config {
  image?: string;
  resources?: { cpus?: number; memory_mb?: number; timeout_seconds?: number };
  network?: {
    allowed_hosts?: string[];
    /** Reached through a blind TLS tunnel, not intercepted: no secret may go to one. */
    tunnel_hosts?: string[];
    denied_hosts?: string[];
    block_private_ips?: boolean;
    secrets?: Record<string, { value: string; hosts: string[] }>;
    add_hosts?: string[];
    upstream_ca?: string;
  };
  vfs?: {
    direct_mounts?: Record<string, { host_path: string; readonly?: boolean }>;
    mounts?: Record<string, Mount>;
  };
  env?: Record<string, string>;
  /** ask: a connection no rule covers waits for approve or deny (the approval event). */
  approvals?: { mode: 'ask' | 'deny'; timeout_seconds?: number };
}

export interface Mount {
  type: 'memory' | 'real_fs' | 'overlay' | string;
  host_path?: string;
  readonly?: boolean;
  upper?: Mount;
  lower?: Mount;
}

export interface CreateResult {
  id: string;
  env: Record<string, string>;
  network?: 'transparent' | 'proxy';
  workspace: string;
  warnings?: string[];
}

export interface ExecResult {
  exit_code: number;
  stdout: string;
  stderr: string;
  duration_ms: number;
  reason?: string;
  truncated?: boolean;
}

export interface ExecOptions {
  env?: Record<string, string>;
  stdin?: string | Uint8Array;
  timeoutMs?: number;
}

export interface FileInfo {
  name: string;
  size: number;
  mode: number;
  is_dir: boolean;
  link?: string;
  mod_time?: number;
}

export interface NetworkEvent {
  kind: 'http' | 'network' | 'dns';
  method?: string;
  url?: string;
  host?: string;
  port?: number;
  status_code: number;
  request_bytes: number;
  response_bytes: number;
  duration_ms: number;
  blocked: boolean;
  decision?: string;
  reason?: string;
}

export interface FileEvent {
  op: 'create' | 'write' | 'delete';
  path: string;
  size: number;
}

export interface ExecEvent {
  phase: 'start' | 'exit';
  command: string;
  pid?: number;
  exit_code: number;
  duration_ms?: number;
}

export type Event =
  | { type: 'network'; timestamp: number; network: NetworkEvent }
  | { type: 'file'; timestamp: number; file: FileEvent }
  | { type: 'exec'; timestamp: number; exec: ExecEvent }
  | { type: 'approval'; timestamp: number; approval: ApprovalEvent }
  | { type: 'mcp' | 'hostexec' | 'llm' | 'workspace' | 'lifecycle' | 'audit'; timestamp: number; record: RecordEvent };

/** A connection waiting for a decision (phase request), or its decision (phase resolved). */
export interface ApprovalEvent {
  phase: 'request' | 'resolved';
  id: string;
  subject: string;
  host?: string;
  port?: number;
  reason?: string;
  decision?: 'allow' | 'deny';
  scope?: string;
  by?: string;
}

/** An audit record of a kind with no event of its own, as airlock audit --json shows it. */
export interface RecordEvent {
  kind: string;
  decision?: string;
  subject?: string;
  rule?: string;
  reason?: string;
  op?: string;
  host?: string;
  port?: number;
  method?: string;
  path?: string;
  status?: number;
  argv?: string[];
  exit_code?: number;
  duration_ms?: number;
  backend?: string;
  added?: number;
  modified?: number;
  deleted?: number;
  count?: number;
  extra?: Record<string, string>;
}

export declare const MAX_LINE: number;

export declare class SandboxError extends Error {
  code: number;
  /** The server's data.kind: not_found, permission, closed, invalid_config, ... */
  kind: string;
  constructor(message: string, code?: number, kind?: string);
}

export declare class Sandbox {
  private constructor();
  static create(config?: Config, options?: { binary?: string; env?: NodeJS.ProcessEnv }): Promise<Sandbox>;
  /** airlock rpc with no sandbox of its own: list, get, kill. */
  static manage(options?: { binary?: string; env?: NodeJS.ProcessEnv }): Promise<Sandbox>;
  readonly info: CreateResult;
  readonly id: string;
  readonly env: Record<string, string>;
  exec(command: string, workingDir?: string, opts?: ExecOptions): Promise<ExecResult>;
  execStream(
    command: string,
    onOutput: (stream: 'stdout' | 'stderr', data: Buffer) => void,
    workingDir?: string,
    opts?: ExecOptions,
  ): Promise<{ exit_code: number; duration_ms: number; reason?: string }>;
  writeFile(path: string, content: string | Uint8Array, mode?: number): Promise<void>;
  readFile(path: string): Promise<Buffer>;
  listFiles(path: string): Promise<FileInfo[]>;
  onEvent(handler: (event: Event) => void): void;
  list(): Promise<SandboxEntry[]>;
  get(ref: string): Promise<SandboxEntry>;
  kill(ref: string): Promise<void>;
  onApproval(handler: (approval: ApprovalEvent) => void): void;
  approve(id: string, opts?: { scope?: 'once' | 'session' | 'project' | 'global'; wildcard?: boolean }): Promise<void>;
  deny(id: string, opts?: { scope?: 'once' | 'session' | 'project' | 'global' }): Promise<void>;
  close(): Promise<void>;
  call<T = any>(method: string, params?: object): Promise<T>;
}

/** A sandbox as list and get give it (airlock ls --json's shape). */
export interface SandboxEntry {
  id: string;
  name?: string;
  origin?: string;
  backend?: string;
  status: { state: string; [k: string]: unknown };
  state_dir: string;
  [k: string]: unknown;
}
