// Drives airlock ui in Debian's headless chromium (internal/ui/browser_test.go
// runs it). Environment:
//   AIRLOCK_UI_URL         the URL airlock ui printed
//   AIRLOCK_UI_SCREENSHOT  where to write a PNG of the page
//   AIRLOCK_UI_MODE        approve (default): wait for a request, click Allow once
//                          undo: allow project as a wildcard, then Undo it
//                          bad-token: the page must not load
//                          banner: reconnect after the stream ends, then show
//                          the banner when the server stops
//   AIRLOCK_UI_REQUEST     the request id to wait for (approve, undo, banner)
//   CHROMIUM               the browser (default /usr/bin/chromium)
// It prints one line per step reached on stdout; the Go test acts on them.
import { chromium } from "playwright-core";

const url = process.env.AIRLOCK_UI_URL;
const shot = process.env.AIRLOCK_UI_SCREENSHOT;
const mode = process.env.AIRLOCK_UI_MODE || "approve";
const id = process.env.AIRLOCK_UI_REQUEST || "";
if (!url || !shot) {
  console.error("set AIRLOCK_UI_URL and AIRLOCK_UI_SCREENSHOT");
  process.exit(2);
}

function fail(msg) {
  throw new Error(msg);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push(String(e)));
  const step = (s) => console.log(s);

  if (mode === "bad-token") {
    const res = await page.goto(url);
    if (res.status() !== 403) fail(`wrong token: status ${res.status()}, want 403`);
    await page.waitForTimeout(500);
    if (await page.locator("#pending").count() !== 0) fail("the page loaded with a wrong token");
    await page.screenshot({ path: shot });
    step("refused");
  } else if (mode === "approve") {
    const res = await page.goto(url);
    if (res.status() !== 200) fail(`load: status ${res.status()}`);
    // The token moved to a cookie and left the address bar.
    if (new URL(page.url()).search !== "") fail(`address bar still has ${page.url()}`);
    const li = page.locator(`li.request[data-id="${id}"]`);
    await li.waitFor({ timeout: 15000 });
    const left = await li.locator(".countdown").textContent();
    if (!/denied in \d+s/.test(left)) fail(`countdown ${JSON.stringify(left)}`);
    step("pending");
    await page.screenshot({ path: shot.replace(/\.png$/, "") + "-pending.png" });
    await li.locator('button[data-action="allow"][data-scope="once"]').click();
    await li.waitFor({ state: "detached", timeout: 10000 });
    await page.locator("#recent li", { hasText: "allowed" }).waitFor({ timeout: 10000 });
    await page.screenshot({ path: shot });
    step("allowed");
  } else if (mode === "undo") {
    await page.goto(url);
    const li = page.locator(`li.request[data-id="${id}"]`);
    await li.waitFor({ timeout: 15000 });
    await li.locator("input.wildcard").check();
    await li.locator('button[data-action="allow"][data-scope="project"]').click();
    const rule = page.locator("#rules li", { hasText: "*.example.com" });
    await rule.waitFor({ timeout: 10000 });
    step("saved");
    await page.locator("#recent li button.undo").click();
    await rule.waitFor({ state: "detached", timeout: 10000 });
    await page.locator("#norules").waitFor({ state: "visible", timeout: 10000 });
    await page.screenshot({ path: shot });
    step("undone");
  } else if (mode === "banner") {
    await page.goto(url);
    await page.locator('body[data-connected="true"]').waitFor({ timeout: 10000 });
    if (await page.locator("#banner").isVisible()) fail("banner shown while connected");
    step("connected");
    // The test ends the stream and adds a request: the page reconnects
    // and shows it.
    await page.locator(`li.request[data-id="${id}"]`).waitFor({ timeout: 15000 });
    await page.locator('body[data-connected="true"]').waitFor({ timeout: 10000 });
    step("reconnected");
    // The test stops the server.
    await page.locator("#banner").waitFor({ state: "visible", timeout: 15000 });
    await page.screenshot({ path: shot });
    step("banner");
  } else {
    fail(`unknown mode ${mode}`);
  }
  const csp = problems.filter((p) => /Content Security Policy|Refused to/i.test(p));
  if (csp.length) fail(`the page broke its own policy: ${csp.join("; ")}`);
} finally {
  await browser.close();
}
