// Loads a page through a sandbox's published port in Debian's headless
// chromium (cmd/airlock/ports_e2e_test.go runs it) and prints
// "TITLE: TEXT" once the page's own script has fetched TEXT. Environment:
//   PAGE_URL        the published port's URL
//   PLAYWRIGHT_DIR  a directory whose node_modules holds playwright-core
//                   (internal/ui/testdata/browser)
//   CHROMIUM        the browser (default /usr/bin/chromium)
import { createRequire } from "node:module";

const { chromium } = createRequire(process.env.PLAYWRIGHT_DIR + "/")("playwright-core");
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
});
try {
  const page = await browser.newPage();
  const res = await page.goto(process.env.PAGE_URL);
  if (!res || res.status() !== 200) throw new Error("status " + (res && res.status()));
  await page.waitForFunction(() => document.getElementById("out").textContent !== "loading", null, { timeout: 20000 });
  console.log((await page.title()) + ": " + (await page.textContent("#out")));
} finally {
  await browser.close();
}
