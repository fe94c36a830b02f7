import * as fs from 'node:fs';
export * from 'node:fs';
export default fs.default ?? fs;
// Node 20 lacks fs.globSync (22+); the conformance CLI imports it.
export function globSync(pattern, opts) {
  if (fs.globSync) return fs.globSync(pattern, opts);
  throw new Error('globSync is not available on Node ' + process.version);
}
