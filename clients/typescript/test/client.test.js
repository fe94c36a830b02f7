// Every method of the client against the real `airlock rpc`.
// Run: AIRLOCK_BIN=/path/to/airlock node --test test/
// (Go's cmd/airlock e2e suite runs it with the binary it builds.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, SandboxError } from '../index.js';

const skip = process.env.AIRLOCK_BIN ? false : 'set AIRLOCK_BIN to an airlock binary';

test('every method', { skip }, async () => {
  const sb = await Sandbox.create({ env: { GREETING: 'hi' }, resources: { memory_mb: 512 } });
  const events = [];
  sb.onEvent((e) => events.push(e));
  try {
    assert.equal(sb.env.GREETING, 'hi');
    let r = await sb.exec('echo $GREETING; pwd; echo err >&2; exit 4');
    assert.deepEqual([r.exit_code, r.stdout, r.stderr], [4, 'hi\n/workspace\n', 'err\n']);

    r = await sb.exec('cat', undefined, { stdin: 'fed in' });
    assert.equal(r.stdout, 'fed in');

    const chunks = [];
    const f = await sb.execStream('echo a; sleep 0.05; echo b; echo c >&2', (s, d) => chunks.push(`${s}:${d}`));
    assert.equal(f.exit_code, 0);
    // Each stream in order; the two pipes' relative order is the kernel's.
    assert.equal(chunks.filter((c) => c.startsWith('stdout:')).join(''), 'stdout:a\nstdout:b\n');
    assert.equal(chunks.filter((c) => c.startsWith('stderr:')).join(''), 'stderr:c\n');

    const data = Buffer.alloc(100_000, 7);
    await sb.writeFile('/workspace/d/bin.dat', data, 0o600);
    assert.deepEqual(await sb.readFile('/workspace/d/bin.dat'), data);
    const files = await sb.listFiles('/workspace/d');
    assert.deepEqual(files.map((x) => [x.name, x.size, x.mode, x.is_dir]), [['bin.dat', 100_000, 0o600, false]]);

    await assert.rejects(sb.readFile('/workspace/missing'), (e) => e instanceof SandboxError && e.kind === 'not_found');
    await assert.rejects(sb.writeFile('/etc/passwd', 'x'), (e) => e.kind === 'permission');
    await assert.rejects(sb.call('format_disk'), (e) => e.code === -32601);
    await assert.rejects(sb.call('exec', { command: 5 }), (e) => e.code === -32602);

    // Many requests in flight at once.
    const all = await Promise.all([...Array(8).keys()].map((i) => sb.exec(`echo ${i}`)));
    assert.deepEqual(all.map((x) => x.stdout), [...Array(8).keys()].map((i) => `${i}\n`));

    await sb.exec('rm d/bin.dat');
    const deadline = Date.now() + 5000;
    while (!events.some((e) => e.type === 'file' && e.file.op === 'delete') && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(events.some((e) => e.type === 'file' && e.file.op === 'write'), 'a write event');
    assert.ok(events.some((e) => e.type === 'file' && e.file.op === 'delete'), 'a delete event');
    assert.ok(events.some((e) => e.type === 'exec' && e.exec.phase === 'exit'), 'an exec event');
  } finally {
    await sb.close();
  }
  await assert.rejects(sb.exec('true'), (e) => e.kind === 'closed');
});

test('a bad config is -32602', { skip }, async () => {
  await assert.rejects(
    Sandbox.create({ vfs: { mounts: { '/data': { type: 's3' } } } }),
    (e) => e instanceof SandboxError && e.code === -32602 && e.kind === 'invalid_config',
  );
  await assert.rejects(
    Sandbox.create({ network: { tunnel_hosts: ['api.x.test'], secrets: { K: { value: 'abcdefgh', hosts: ['api.x.test'] } } } }),
    (e) => e.code === -32602 && e.kind === 'invalid_config' && e.message.includes('a tunnel cannot swap secrets in'),
  );
});

// Approvals, against an HTTPS server on loopback the Go suite starts.
const upstream = process.env.AIRLOCK_TEST_UPSTREAM;
const skipUp = skip || (upstream ? false : 'set AIRLOCK_TEST_UPSTREAM(_CA, _LOG) (the Go suite does)');
const askConfig = () => ({
  approvals: { mode: 'ask', timeout_seconds: 60 },
  network: { add_hosts: [`example.com:${upstream.split(':')[0]}`], upstream_ca: process.env.AIRLOCK_TEST_UPSTREAM_CA },
});
const logged = async (path) => (await import('node:fs')).readFileSync(process.env.AIRLOCK_TEST_UPSTREAM_LOG, 'utf8').includes(path);

test('approve lets a waiting request through; deny refuses it', { skip: skipUp }, async () => {
  const ok = `/ts-approved-${process.pid}`;
  const no = `/ts-denied-${process.pid}`;
  const sb = await Sandbox.create(askConfig());
  const asked = [];
  const resolved = [];
  sb.onEvent((e) => { if (e.type === 'approval' && e.approval.phase === 'resolved') resolved.push(e.approval); });
  sb.onApproval((a) => {
    asked.push(a);
    (a.subject === 'example.com' && asked.length === 1 ? sb.approve(a.id) : sb.deny(a.id)).catch(() => {});
  });
  try {
    let r = await sb.exec(`curl -sS --max-time 30 https://example.com${ok}`);
    assert.equal(r.exit_code, 0, r.stderr);
    assert.ok(await logged(ok), `the upstream's log lacks ${ok}`);
    // Once: the next connection asks again, and this time is denied.
    r = await sb.exec(`curl -sS --max-time 30 https://example.com${no}`);
    assert.notEqual(r.exit_code, 0);
    assert.ok(!(await logged(no)), `a denied request reached the upstream: ${no}`);
    for (const end = Date.now() + 5000; resolved.length < 2 && Date.now() < end;) await new Promise((res) => setTimeout(res, 50));
    assert.deepEqual(resolved.map((a) => [a.decision, a.by]), [['allow', 'rpc'], ['deny', 'rpc']]);
    await assert.rejects(sb.approve('no-such-request'), (e) => e instanceof SandboxError && e.kind === 'not_found');
  } finally {
    await sb.close();
  }
});

test('the manager lists, gets and kills a sandbox', { skip }, async () => {
  const sb = await Sandbox.create({});
  const m = await Sandbox.manage();
  try {
    const mine = (await m.list()).find((e) => e.id === sb.id);
    assert.ok(mine, `list lacks ${sb.id}`);
    assert.equal(mine.status.state, 'running');
    assert.equal((await m.get(sb.id)).id, sb.id);
    await assert.rejects(m.get('no-such-sandbox'), (e) => e instanceof SandboxError && e.kind === 'not_found');
    await m.kill(sb.id);
    // Gone from the state dir (nothing left to review), or stopped.
    const after = await m.get(sb.id).catch((e) => (e.kind === 'not_found' ? null : Promise.reject(e)));
    assert.notEqual(after?.status?.state, 'running');
    await assert.rejects(sb.exec('true'), (e) => e.kind === 'closed');
  } finally {
    await m.close();
    await sb.close();
  }
});
