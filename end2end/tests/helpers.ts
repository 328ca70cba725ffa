// Shared steps for the specs: logging in as a demo account, waiting for hydration, making
// uniquely named things, and watching the browser for uncaught errors.
import { test as base, expect, type Browser, type Page } from '@playwright/test';

/** The accounts `arbiter demo` creates, with their passwords. */
export const DEMO_PASSWORDS = {
  lead: 'lead-demo-pass',
  researcher: 'researcher-demo-pass',
  annotator1: 'annotator1-demo-pass',
  annotator2: 'annotator2-demo-pass',
  reviewer: 'reviewer-demo-pass',
} as const;
export type DemoUser = keyof typeof DEMO_PASSWORDS;

/** What the demo seeds: the eval and the two runs launched against the simulator. */
export const DEMO_EVAL = 'qa-basic exact match';
export const DEMO_RUN_LABELS = {
  1: `#1 ${DEMO_EVAL} on simulator/ckpt-a`,
  2: `#2 ${DEMO_EVAL} on simulator/ckpt-b`,
} as const;

/** The single message for every failed login (never says whether the account exists). */
export const LOGIN_FAILED = 'unknown username or wrong password';

/**
 * Runs before any page script: notes when the app's wasm module has been instantiated. The
 * page's loader calls `hydrate()` in the same chain of promise callbacks, so once a later task
 * sees the flag, hydration has run. (Leptos leaves no marker of its own in the DOM.)
 */
function markHydration() {
  const flag = () => setTimeout(() => ((window as any).__arbiterHydrated = true), 0);
  for (const name of ['instantiateStreaming', 'instantiate'] as const) {
    const original = (WebAssembly as any)[name];
    if (typeof original !== 'function') continue;
    (WebAssembly as any)[name] = function (...args: unknown[]) {
      const result: Promise<unknown> = original.apply(WebAssembly, args);
      result.then(flag, () => {});
      return result;
    };
  }
}

/**
 * Everything a page reports that a user would suffer from: uncaught exceptions (a wasm panic
 * lands here) and console errors and warnings (failed loads, hydration mismatches).
 */
export class BrowserLog {
  readonly uncaught: string[] = [];
  readonly console: string[] = [];

  async watch(page: Page) {
    page.on('pageerror', (error) => this.uncaught.push(`${page.url()}: ${error.stack ?? error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error' || message.type() === 'warning') {
        const where = message.location().url;
        this.console.push(`[${message.type()}] ${message.text()}${where ? ` (${where})` : ''}`);
      }
    });
    await page.addInitScript(markHydration);
  }
}

/**
 * The specs' `test`: every page is watched, the console is printed when a test fails, and a
 * test fails if any page threw an uncaught error, even if its assertions passed.
 */
export const test = base.extend<{ browserLog: BrowserLog }>({
  browserLog: [
    async ({ page }, use, testInfo) => {
      const log = new BrowserLog();
      await log.watch(page);
      await use(log);
      if (testInfo.status !== testInfo.expectedStatus && log.console.length > 0) {
        console.log(`browser console during "${testInfo.title}":\n  ${log.console.join('\n  ')}`);
      }
      expect(log.uncaught, 'uncaught errors in the page').toEqual([]);
    },
    { auto: true },
  ],
});
export { expect };

/** Waits until the current page's wasm has loaded and hydrated it (buttons and keys work). */
export async function waitForHydration(page: Page) {
  await page.waitForLoadState('networkidle');
  await page.waitForFunction(() => (window as any).__arbiterHydrated === true, null, {
    timeout: 30_000,
  });
}

/** Fills and submits the login form, without checking the outcome. */
export async function submitLogin(page: Page, username: string, password: string) {
  await page.goto('/login');
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

/** Logs in as a demo account and checks the top bar says who is logged in. */
export async function login(page: Page, user: DemoUser) {
  await submitLogin(page, user, DEMO_PASSWORDS[user]);
  await expect(page).toHaveURL('/');
  await expect(page.getByTestId('whoami')).toHaveText(user);
}

/** A second, separate browser session (own cookies), watched like the test's own page. */
export async function openSessionAs(browser: Browser, user: DemoUser, log: BrowserLog) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await log.watch(page);
  await login(page, user);
  return { page, close: () => context.close() };
}

/**
 * A rater of the test's own, invited by the lead signed in on `lead` (no training items), who
 * has chosen their password and is signed in on a page of their own: a test's skips then touch
 * no other spec's items.
 */
export async function invitedRater(lead: Page, browser: Browser, log: BrowserLog, prefix: string) {
  await lead.goto('/raters');
  await waitForHydration(lead);
  const name = uniqueName(prefix);
  await lead.getByText('Invite a rater').click();
  await lead.getByLabel('Username').fill(name);
  await lead.getByLabel('Start with training items').uncheck();
  await lead.getByRole('button', { name: 'Invite' }).click();
  const password = (await lead.getByTestId('invited-password').textContent())!;
  const context = await browser.newContext();
  const page = await context.newPage();
  await log.watch(page);
  await submitLogin(page, name, password);
  await expect(page).toHaveURL(/\/account\/password$/);
  await page.getByLabel('Current password').fill(password);
  await page.getByLabel(/^New password \(/).fill(`${name}-own-password`);
  await page.getByLabel('New password again').fill(`${name}-own-password`);
  await page.getByRole('button', { name: 'Change password' }).click();
  await expect(page.getByTestId('password-changed')).toBeVisible();
  return { name, page, close: () => context.close() };
}

/** What the rater sees of the item on screen: its question and the model output. Raters never
 * see item ids, so this is how a test tells that two raters were shown the same item. */
export type ShownItem = { claim: string; content: string };

/** Opens the annotation queue and waits until its first item is shown and the keys work. */
export async function openQueue(page: Page): Promise<ShownItem> {
  await page.goto('/annotate');
  const task = page.getByTestId('task');
  await expect(task).toBeVisible();
  await expect(page.getByTestId('task-output')).not.toBeEmpty();
  await expect(page.getByTestId('task-input')).not.toBeEmpty();
  // Each claim has its own random handle, never the item's id.
  const claim = await task.getAttribute('data-claim');
  expect(claim).toMatch(/^[0-9a-f]{32}$/);
  const content = `${await page.getByTestId('task-input').textContent()}\n${await page.getByTestId('task-output').textContent()}`;
  // Keys only work once the wasm has hydrated the page.
  await waitForHydration(page);
  return { claim: claim!, content };
}

/** Waits until the queue has moved past the claim `claim`: another item is shown, or the queue
 * is empty. One locator covers both, so the wait cannot catch the old item on its way out. */
export async function expectMovedPast(page: Page, claim: string) {
  const next = page.locator(`[data-testid="task"]:not([data-claim="${claim}"]), [data-testid="queue-empty"]`);
  await expect(next).toBeVisible();
}

/** A name no other test (or earlier run against the same server) has used. */
export function uniqueName(prefix: string) {
  return `${prefix}-${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
}

/** JSONL dataset content from `[id, input, target]` rows. */
export function jsonl(rows: Array<[string, string, string]>) {
  return rows.map(([id, input, target]) => JSON.stringify({ id, input, target })).join('\n') + '\n';
}

/** A small dataset of questions the simulator can answer. */
export const TINY_DATASET: Array<[string, string, string]> = [
  ['tiny-1', 'What is 2 + 2?', '4'],
  ['tiny-2', 'What is the capital of France?', 'Paris'],
  ['tiny-3', 'How many legs does a spider have?', '8'],
];

/**
 * Uploads a dataset through the upload route's JSON interface, sharing the page's session,
 * for tests whose subject is not the upload form. Returns the dataset's id.
 */
export async function uploadDatasetDirectly(page: Page, name: string, content: string) {
  const response = await page.request.post('/datasets/upload', {
    headers: { Accept: 'application/json' },
    multipart: {
      name,
      file: { name: `${name}.jsonl`, mimeType: 'application/jsonl', buffer: Buffer.from(content) },
    },
  });
  expect(response.status(), await response.text()).toBe(201);
  return (await response.json()).dataset_id as number;
}

/** Opens the Evals page's form with the eval's name and dataset filled in; returns the form. */
export async function openEvalForm(page: Page, name: string, dataset: string) {
  await page.goto('/evals');
  await waitForHydration(page);
  const form = page.locator('form').filter({ has: page.getByRole('button', { name: 'Define eval' }) });
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Dataset').selectOption({ label: dataset });
  return form;
}

/** Defines an eval with the Evals page's form and waits for it to be listed. */
export async function defineEval(
  page: Page,
  eval_: { name: string; dataset: string; repetitions: number },
) {
  const form = await openEvalForm(page, eval_.name, eval_.dataset);
  await form.getByLabel('Repetitions').fill(String(eval_.repetitions));
  await form.getByRole('button', { name: 'Define eval' }).click();
  const row = evalRow(page, eval_.name);
  await expect(row).toContainText(`${eval_.repetitions} rep(s)`);
  return row;
}

/** The eval's row in the Evals page's launch table. */
export function evalRow(page: Page, evalName: string) {
  return page.getByRole('row').filter({ has: page.getByRole('cell', { name: evalName, exact: true }) });
}

/** Launches an eval (on the Evals page) against a checkpoint; returns the new run's id. */
export async function launchRun(page: Page, evalName: string, checkpoint: string) {
  await page.goto('/evals');
  await waitForHydration(page);
  const row = evalRow(page, evalName);
  await row.getByLabel(`checkpoint for ${evalName}`).selectOption({ label: checkpoint });
  await row.getByRole('button', { name: 'Launch' }).click();
  await expect(page).toHaveURL(/\/runs\/\d+$/);
  return Number(new URL(page.url()).pathname.split('/').pop());
}

/** Opens a run's page and waits until its status has left `running`; returns that status. */
export async function waitForRunToFinish(page: Page, runId: number) {
  if (new URL(page.url()).pathname !== `/runs/${runId}`) await page.goto(`/runs/${runId}`);
  const status = page.getByTestId('run-status');
  // The page follows the run's progress events once hydrated; no reload is needed.
  await expect(status).not.toHaveText('running', { timeout: 45_000 });
  return status.innerText();
}

/** A run's `to human review` count, read from its page once the run has finished. */
export async function uncertainCount(page: Page, runId: number) {
  await page.goto(`/runs/${runId}`);
  await expect(page.getByTestId('run-status')).toHaveText('completed', { timeout: 45_000 });
  return Number(await page.getByTestId('count-uncertain').innerText());
}

/** A grader that never decides: every item goes to humans. */
const NEVER_DECIDES = '{"kind": "regex_match", "pattern": "NEVER IN A REPLY (x)"}';

/** As a researcher: an eval on the JSONL `content` (`items` items) whose items all reach
 * humans, launched as a promotion decision against `checkpoint`; the policy has every label
 * reviewed unless `reviewRate` says otherwise, and raters answer `rubric` when one is named.
 * Waits until the run is answered and returns its id. */
export async function launchReviewedRun(
  page: Page,
  content: string,
  items: number,
  checkpoint = 'simulator/ckpt-a',
  policy: { reviewRate?: string; rubric?: string } = {},
) {
  const dataset = uniqueName('qc-data');
  await uploadDatasetDirectly(page, dataset, content);
  const evalName = uniqueName('qc eval');
  const form = await openEvalForm(page, evalName, dataset);
  await form.getByLabel('Repetitions').fill('1');
  await form.getByText('Advanced: grader as JSON').click();
  await form.getByLabel('Grader spec as JSON', { exact: false }).fill(NEVER_DECIDES);
  await form.getByRole('button', { name: 'Define eval' }).click();

  await page.getByRole('link', { name: evalName }).click();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Eval: ${evalName}`);
  await waitForHydration(page);
  await page.getByLabel('QC review rate').fill(policy.reviewRate ?? '1');
  if (policy.rubric) await page.getByLabel('Rubric raters answer').fill(policy.rubric);
  await page.getByLabel('What changed and why').fill('every item to humans');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(page.getByTestId('policy-history').locator('tbody tr')).toHaveCount(1);

  await page.goto('/evals');
  await waitForHydration(page);
  const row = page.getByRole('row').filter({ has: page.getByRole('link', { name: evalName, exact: true }) });
  await row.getByLabel(`checkpoint for ${evalName}`).selectOption({ label: checkpoint });
  await row.getByLabel(`priority for ${evalName}`).selectOption('promotion');
  await row.getByRole('button', { name: 'Launch' }).click();
  await expect(page).toHaveURL(/\/runs\/\d+$/);
  const runId = Number(new URL(page.url()).pathname.split('/').pop());
  await waitForRunToFinish(page, runId);
  await expect(page.getByTestId('count-uncertain')).toHaveText(String(items));
  return runId;
}
