#!/usr/bin/env node
// dump.mjs FILE.yaml ...: prints the objects of the files as one JSON array
// ({file, index, doc} each), for the Python test that has no YAML parser.
import { loadYAML, bailOut } from "./lib.mjs";

const files = process.argv.slice(2);
if (!files.length) bailOut("usage: dump.mjs FILE.yaml ...");
const out = [];
for (const f of files) {
  try {
    out.push(...loadYAML(f));
  } catch (e) {
    bailOut(`cannot parse ${f}: ${e.message}`);
  }
}
process.stdout.write(JSON.stringify(out));
