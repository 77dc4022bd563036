// The dashboard in a real browser: Debian's chromium, driven by playwright-core (from npm; it
// downloads no browser), loads https://ADMIN/ with the operator's client certificate, and checks
// what an operator would look at: the pipeline DAG with every stage and where it runs, charts
// drawn by uPlot, throughput that changes while dashboard_browser_test.py runs a load, recent
// decisions with card tokens and no card number, and that every request the page made went to
// txscore itself. Saves a screenshot.
//
//   node dashboard_browser_test.js NODE_MODULES ORIGIN CA CERT KEY STAGES CARD_NUMBERS SCREENSHOT
//
// STAGES: the pipeline's stage names, comma-separated. CARD_NUMBERS: a file of the card numbers
// the load sends, one a line. Exit status 0 when every check passes.
"use strict";

const path = require("path");
const fs = require("fs");

const [nodeModules, origin, caPath, certPath, keyPath, stageList, cardNumbersFile, screenshot] = process.argv.slice(2);
const { chromium } = require(path.join(nodeModules, "playwright-core"));
const expectedStages = stageList.split(",");

function check(condition, what) {
  if (!condition) throw new Error("FAILED: " + what);
  console.log("ok   " + what);
}

async function main() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    // Root in a container: no sandbox. No background networking: this machine's network is
    // closed, and the page must need none.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync"],
  });
  try {
    // Playwright's own TLS client presents the client certificate on the browser's behalf and
    // checks the server's certificate against Node's CAs, which dashboard_browser_test.py
    // extends with the demo CA (NODE_EXTRA_CA_CERTS).
    const context = await browser.newContext({
      clientCertificates: [{ origin, certPath, keyPath }],
      viewport: { width: 1400, height: 1500 },
    });
    const page = await context.newPage();
    const requested = [];
    page.on("request", (request) => requested.push(request.url()));
    const pageErrors = [];
    page.on("pageerror", (error) => pageErrors.push(String(error)));
    page.on("console", (message) => { if (message.type() === "error") pageErrors.push(message.text()); });
    page.on("response", (response) => {
      if (response.status() >= 400) pageErrors.push(`${response.url()}: ${response.status()}`);
    });

    const answer = await page.goto(origin + "/", { waitUntil: "load" });
    check(answer.status() === 200, "GET / answers 200 over HTTPS with the client certificate");
    check(/default-src 'self'/.test(answer.headers()["content-security-policy"] || ""),
          "the page may load only what this port serves (Content-Security-Policy default-src 'self')");

    // The DAG: one node per stage, each saying its device.
    await page.waitForFunction((n) => document.querySelectorAll("#dag g.node").length === n, expectedStages.length,
                               { timeout: 30000 });
    const nodes = await page.$$eval("#dag g.node", (gs) => gs.map((g) => [g.dataset.stage, g.dataset.device]));
    check(JSON.stringify(nodes.map((n) => n[0]).sort()) === JSON.stringify([...expectedStages].sort()),
          `the DAG draws every stage: ${nodes.map((n) => n.join("@")).join(", ")}`);
    check(nodes.every((n) => n[1]), "every stage says where it runs");
    const edges = await page.$$eval("#dag path.edge", (ps) => ps.length);
    check(edges >= expectedStages.length - 1, `the DAG draws the stages' edges (${edges})`);
    const why = await page.$$eval("#placements tbody tr", (rows) => rows.map((r) => r.lastChild.textContent));
    check(why.length === expectedStages.length && why.every((w) => w.length > 0),
          "each stage's placement says why it runs there");

    // Charts: uPlot draws each into a canvas; the readings keep coming.
    await page.waitForFunction(() => document.querySelectorAll(".chart canvas").length >= 3, null, { timeout: 30000 });
    check(true, "three charts are drawn (uPlot canvases for throughput, latency, devices)");

    // The numbers change while the load runs: two readings of requests/s a few seconds apart,
    // both positive and different, and the throughput chart gained points.
    const rate = async () => Number(await page.textContent("#now-requests-per-s"));
    const points = async () => Number(await page.getAttribute("#chart-throughput", "data-points"));
    await page.waitForFunction(() => Number(document.getElementById("now-requests-per-s").textContent) > 0, null,
                               { timeout: 60000 });
    const first = await rate(), firstPoints = await points();
    let second = first;
    // The load comes in bursts (a file of transactions at a time): wait for another busy second.
    for (let i = 0; i < 60 && (second === first || second === 0); i++) {
      await page.waitForTimeout(1000);
      second = await rate();
    }
    const secondPoints = await points();
    check(first > 0 && second > 0 && second !== first,
          `requests/s changes while the load runs: ${first} then ${second}`);
    check(secondPoints > firstPoints, `the throughput chart gains points (${firstPoints} -> ${secondPoints})`);
    const series = await page.getAttribute("#chart-throughput", "data-series");
    check(expectedStages.some((stage) => series.split(",").includes(stage)),
          `the throughput chart has a series per stage (${series})`);
    check(await page.getAttribute("#chart-latency", "data-scale") === "log",
          "the latency chart has a log scale (request p50 and the LLM stage both readable)");
    const p99 = await page.textContent("#now-p99-ms");
    check(Number(p99) > 0, `request latency p99 is shown (${p99} ms)`);

    // Recent decisions: card tokens, never a card number.
    await page.waitForFunction(() => document.querySelectorAll("#decisions tbody tr").length > 0, null,
                               { timeout: 30000 });
    const tokens = await page.$$eval("#decisions tbody tr", (rows) => rows.map((r) => r.children[2].textContent));
    check(tokens.length > 0 && tokens.every((t) => t.length > 0), `recent decisions list card tokens (${tokens[0]})`);
    // The REVIEW filter: the load's attacked cards give REVIEWs; only they are listed then,
    // with the rules and findings columns an operator acts on.
    const headers = await page.$$eval("#decisions thead th", (ths) => ths.map((th) => th.firstChild.textContent.trim()));
    check(JSON.stringify(headers) === JSON.stringify(["time", "request", "card token", "score", "decision", "rules",
                                                      "reasons", "findings"]),
          `the decisions table has rules and findings columns (${headers.join(", ")})`);
    await page.click('#decision-filters button[data-filter="REVIEW"]');
    await page.waitForFunction(() => document.querySelectorAll("#decisions tbody tr").length > 0 &&
                                     document.getElementById("decisions").dataset.filter === "REVIEW",
                               null, { timeout: 60000 });
    // One read of both, between two polls' redraws.
    const [reviewed, counted] = await page.evaluate(() => [
      [...document.querySelectorAll("#decisions tbody tr")].map((r) => r.children[4].textContent),
      document.getElementById("decisions-shown").textContent]);
    check(reviewed.length > 0 && reviewed.every((d) => d === "REVIEW"),
          `the REVIEW filter lists REVIEWs only (${reviewed.length})`);
    check(new RegExp(`^${reviewed.length} of the last \\d+$`).test(counted), `the table says how many it shows (${counted})`);
    await page.click('#decision-filters button[data-filter="all"]');
    const html = await page.content();
    const cardNumbers = fs.readFileSync(cardNumbersFile, "utf8").split("\n").filter((n) => n.length > 0);
    const shown = cardNumbers.filter((n) => html.includes(n));
    check(cardNumbers.length > 0 && shown.length === 0,
          `none of the ${cardNumbers.length} card numbers sent is on the page` + (shown.length ? ": " + shown[0] : ""));

    check(pageErrors.length === 0, "the page logged no error" + (pageErrors.length ? ": " + pageErrors.join("; ") : ""));
    const elsewhere = requested.filter((url) => !url.startsWith(origin + "/"));
    check(elsewhere.length === 0, `every request went to txscore (${requested.length} requests)` +
                                  (elsewhere.length ? "; elsewhere: " + elsewhere.join(", ") : ""));
    // A failing poll is said in the header, and the page recovers when the answers return.
    await page.route("**/api/dashboard", (route) => route.abort());
    await page.waitForFunction(() => /cannot read \/api\/dashboard/.test(document.getElementById("connection").textContent),
                               null, { timeout: 30000 });
    check(await page.$$eval("#dag g.node", (gs) => gs.length) === expectedStages.length,
          "a failed poll is said in the header and what was drawn stays");
    await page.unroute("**/api/dashboard");
    await page.waitForFunction(() => document.getElementById("connection").textContent === "live", null,
                               { timeout: 30000 });
    check(true, "the page is live again once /api/dashboard answers");

    await page.screenshot({ path: screenshot, fullPage: true });
    check(fs.statSync(screenshot).size > 10000, `the screenshot was saved (${screenshot})`);
  } finally {
    await browser.close();
  }
  console.log("dashboard browser test: all passed");
}

main().catch((error) => {
  console.error(error.stack || String(error));
  process.exit(1);
});
