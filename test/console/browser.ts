import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

// Debian's Chromium driven by playwright-core (no browser download). Where the binary is missing,
// the browser tests are skipped with its name locally, and fail under CI=true: a CI run that
// silently skipped them would report the console as tested.

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--headless',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Whether to skip: the binary is missing and this is not CI. */
export function skipWithoutChromium(): boolean {
  return !existsSync(CHROMIUM_PATH) && process.env.CI !== 'true';
}

export const SKIP_REASON = `browser tests need ${CHROMIUM_PATH} (apt-get install -y --no-install-recommends chromium); skipped locally, a failure under CI=true`;

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) throw new Error(`${CHROMIUM_PATH} is not installed: ${SKIP_REASON}`);
  return chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS, timeout: 120_000 });
}

/** Where the run writes its screenshots (gitignored). */
export const SCREENSHOT_DIR = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'test-output',
  'console',
);

/** A full-page screenshot; with `top`, also the first `top` pixels alone (the docs' size). */
export async function screenshot(page: Page, name: string, top?: number): Promise<string> {
  await mkdir(SCREENSHOT_DIR, { recursive: true });
  const file = path.join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  if (top !== undefined) {
    const width = page.viewportSize()?.width ?? 1100;
    await page.screenshot({
      path: path.join(SCREENSHOT_DIR, `${name}-top.png`),
      fullPage: true,
      clip: { x: 0, y: 0, width, height: top },
    });
  }
  return file;
}
