// Browser tests for Arbiter: Playwright drives Debian's chromium against one `arbiter demo`.
//
// The demo seeds accounts, the qa-basic dataset, simulated checkpoints and runs #1 and #2, so
// every spec starts from the same known state. All specs share that one server (one worker,
// files in order), so tests create what they change under unique names.
import { defineConfig, devices } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ADDR = '127.0.0.1:3100';
const SIM_ADDR = '127.0.0.1:8101';
// Set ARBITER_BIN to test another build (e.g. a release binary).
const BIN = process.env.ARBITER_BIN ?? '../target/debug/arbiter';

// The config is loaded by the runner and again by every worker; the environment variable makes
// them agree on one fresh data directory, so the demo always starts from an empty database.
process.env.ARBITER_E2E_DATA_DIR ??= mkdtempSync(join(tmpdir(), 'arbiter-e2e-'));
const DATA_DIR = process.env.ARBITER_E2E_DATA_DIR;

export default defineConfig({
  testDir: './tests',
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: 'list',
  timeout: 60_000,
  forbidOnly: !!process.env.CI,
  use: {
    baseURL: `http://${ADDR}`,
    trace: 'retain-on-failure',
  },
  projects: [
    {
      name: 'chromium',
      use: {
        ...devices['Desktop Chrome'],
        launchOptions: {
          // Debian's chromium; never `npx playwright install` (no internet here).
          executablePath: '/usr/bin/chromium',
          args: [
            '--no-sandbox',
            '--headless',
            '--disable-gpu',
            '--disable-quic',
            '--no-first-run',
            '--disable-background-networking',
            '--disable-component-update',
            '--disable-sync',
          ],
        },
      },
    },
  ],
  webServer: {
    command: [
      JSON.stringify(BIN),
      'demo',
      `--addr ${ADDR}`,
      `--sim-addr ${SIM_ADDR}`,
      `--data-dir ${JSON.stringify(DATA_DIR)}`,
      '--site-root ../target/site',
    ].join(' '),
    url: `http://${ADDR}/health`,
    reuseExistingServer: false,
    timeout: 120_000,
    stdout: 'ignore',
    stderr: 'pipe',
    // The demo allows its own simulator; the tests also use a closed loopback port (9) as an
    // unreachable endpoint and webhook receiver, and port 8109 for a model of their own that
    // answers with hostile markup; an operator would allow endpoints the same way.
    // HumanEval, when scripts/test fetched it, becomes the demo's second code suite.
    env: {
      ...process.env,
      ARBITER_EGRESS_ALLOW: '127.0.0.1:9, 127.0.0.1:8109',
      ...(process.env.ARBITER_TEST_HUMANEVAL ? { ARBITER_DEMO_HUMANEVAL: process.env.ARBITER_TEST_HUMANEVAL } : {}),
    } as Record<string, string>,
  },
});
