// Node 20 lacks fs.globSync (added in 22), which the conformance CLI
// imports: give its modules an fs that has one. Used as node --import.
import { register } from 'node:module';
register(new URL('./hooks.mjs', import.meta.url));
