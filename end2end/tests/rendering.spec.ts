// What raters read: markdown, tables and code rendered, a raw view a key away, and nothing a
// model, a dataset or a person wrote ever running as script, on the annotate, review and
// feedback pages. A model of the test's own answers every request with hostile markup.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Locator, Page } from '@playwright/test';
import { expect, launchReviewedRun, login, openQueue, openSessionAs, test, uniqueName, waitForHydration } from './helpers';

/** Allowed by the demo's egress policy (playwright.config.ts). */
const MODEL_PORT = 8109;

/** Every payload sets `window.__xss` if it ever runs. */
const OUTPUT = [
  'Here is **my answer**, with a table:',
  '',
  '| step | value |',
  '|------|-------|',
  '| <img src=x onerror="window.__xss = 1"> | 42 |',
  '',
  '<script>window.__xss = 2</script>',
  '[details](javascript:window.__xss=3)',
  '',
  '```python',
  'def answer():',
  '    return "</code></pre><script>window.__xss = 4</script>"',
  '```',
].join('\n');
const INPUT = 'What is 6 times 7? <svg onload="window.__xss = 5"></svg> <details open ontoggle="window.__xss = 6">x</details>';
const TARGET = '42 <iframe src="javascript:window.__xss = 7"></iframe>';
const RATIONALE = 'xss-rationale <img src=x onerror="window.__xss = 8"><script>window.__xss = 9</script>';
const REASON = 'xss-reason <script>window.__xss = 10</script> the table has the answer';

/** An OpenAI-compatible endpoint that answers every chat request with OUTPUT. */
function hostileModel(): Promise<Server> {
  const server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      if (request.url?.endsWith('/models')) {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ object: 'list', data: [{ id: 'hostile', object: 'model' }] }));
        return;
      }
      const usage = { prompt_tokens: 12, completion_tokens: 40, total_tokens: 52 };
      if (JSON.parse(body || '{}').stream) {
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        const chunk = (delta: object, finish: string | null, extra: object = {}) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'hostile', choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
        response.end(chunk({ role: 'assistant', content: OUTPUT }, null) + chunk({}, 'stop', { usage }) + 'data: [DONE]\n\n');
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify({
          id: 'c',
          object: 'chat.completion',
          created: 0,
          model: 'hostile',
          choices: [{ index: 0, message: { role: 'assistant', content: OUTPUT }, finish_reason: 'stop' }],
          usage,
        }),
      );
    });
  });
  return new Promise((resolve) => server.listen(MODEL_PORT, '127.0.0.1', () => resolve(server)));
}

/** No payload ran, no dialog opened, and no image from a text was placed on the page. */
async function expectInert(page: Page) {
  expect(await page.evaluate(() => (window as any).__xss)).toBeUndefined();
  await expect(page.locator('.shown img, .shown iframe, .shown svg, .shown script')).toHaveCount(0);
}

/** Moves past what other specs left ahead of this spec's item (a rater skips, a reviewer
 * accepts) until `found`: `card` is the item on screen, named by `attribute`. */
async function moveOnUntil(page: Page, card: Locator, attribute: string, key: string, found: () => Promise<boolean>) {
  for (let attempt = 0; attempt < 20 && !(await found()); attempt++) {
    const before = await card.getAttribute(attribute);
    await page.keyboard.press(key);
    await expect(card).not.toHaveAttribute(attribute, before!);
  }
  expect(await found(), "the spec's own item came up").toBe(true);
}

test.describe.configure({ mode: 'serial' });

test('texts render as people read them and nothing in them runs', async ({ page, browser, browserLog }) => {
  const model = await hostileModel();
  const dialogs: string[] = [];
  try {
    await login(page, 'researcher');
    const checkpoint = uniqueName('hostile');
    await page.goto('/checkpoints');
    await waitForHydration(page);
    await page.getByLabel('Name', { exact: true }).fill(checkpoint);
    await page.getByLabel('Endpoint URL (OpenAI-compatible)').fill(`http://127.0.0.1:${MODEL_PORT}/v1`);
    await page.getByLabel('Served model name').fill('hostile');
    await page.getByRole('button', { name: 'Register' }).click();
    await expect(page.getByRole('row').filter({ hasText: checkpoint })).toBeVisible();
    await launchReviewedRun(page, JSON.stringify({ id: 'xss-1', input: INPUT, target: TARGET }) + '\n', 1, checkpoint);

    // The rater: rendered markdown, a table, highlighted code; raw text a key away.
    const rater = await openSessionAs(browser, 'annotator1', browserLog);
    rater.page.on('dialog', (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    await openQueue(rater.page);
    const output = rater.page.getByTestId('task-output');
    await moveOnUntil(rater.page, rater.page.getByTestId('task'), 'data-claim', 's', async () =>
      (await output.textContent())!.includes('my answer'),
    );
    await expect(output.locator('strong')).toHaveText('my answer');
    await expect(output.locator('table td').last()).toHaveText('42');
    await expect(output.locator('pre.hl-code .hl-storage').first()).toHaveText('def');
    // The javascript: link keeps its text and loses its target.
    await expect(output.locator('a', { hasText: 'details' })).not.toHaveAttribute('href', /./);
    await expect(rater.page.getByTestId('task-input')).toContainText('What is 6 times 7?');
    await expectInert(rater.page);
    // The legend and cheat sheet come from the key map.
    await expect(rater.page.getByTestId('key-legend')).toContainText('pass');
    await rater.page.keyboard.press('?');
    await expect(rater.page.getByTestId('cheat-sheet')).toContainText('raw or rendered texts');
    await rater.page.keyboard.press('?');
    await expect(rater.page.getByTestId('cheat-sheet')).toHaveCount(0);
    await rater.page.keyboard.press('v');
    await expect(output.locator('pre.raw')).toContainText('<script>window.__xss = 2</script>');
    await expect(rater.page.getByTestId('task-target').locator('pre.raw')).toContainText('<iframe');
    await expectInert(rater.page);
    await rater.page.keyboard.press('v');
    await expect(output.locator('strong')).toHaveText('my answer');

    // A rationale with markup is kept as text.
    await rater.page.keyboard.press('r');
    await rater.page.keyboard.type(RATIONALE);
    await rater.page.keyboard.press('Escape');
    await rater.page.keyboard.press('2');
    await expect(rater.page.getByTestId('notice')).toHaveText('Label saved.');

    // The reviewer reads the item and the rationale, and corrects the label with a reason.
    const reviewer = await openSessionAs(browser, 'reviewer', browserLog);
    reviewer.page.on('dialog', (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    await reviewer.page.goto('/review');
    await waitForHydration(reviewer.page);
    const rationale = reviewer.page.getByTestId('review-rationale');
    await expect(rationale).toBeVisible();
    await moveOnUntil(reviewer.page, reviewer.page.getByTestId('review'), 'data-label-id', 'a', async () =>
      (await rationale.textContent())!.includes('xss-rationale'),
    );
    await expect(rationale).toHaveText(RATIONALE);
    await expect(reviewer.page.getByTestId('task-output').locator('table')).toBeVisible();
    await expectInert(reviewer.page);
    await reviewer.page.keyboard.press('r');
    await reviewer.page.keyboard.type(REASON);
    await reviewer.page.keyboard.press('Escape');
    await reviewer.page.keyboard.press('1');
    await expect(reviewer.page.getByTestId('notice')).toHaveText('Decision saved.');
    await reviewer.close();

    // The rater reads the correction and its reason on their own page.
    await rater.page.goto('/annotate/mine');
    await waitForHydration(rater.page);
    const mine = rater.page.getByTestId('own-label').filter({ hasText: 'xss-rationale' });
    await expect(mine.getByTestId('review-outcome')).toContainText('A reviewer corrected it to pass');
    await expect(mine.getByTestId('review-outcome')).toContainText(REASON);
    await expect(mine.getByTestId('own-verdict')).toContainText(RATIONALE);
    await expect(mine.getByTestId('not-editable')).toBeVisible();
    await mine.locator('summary').click();
    await expect(mine.getByTestId('task-output').locator('strong')).toHaveText('my answer');
    await expectInert(rater.page);
    await rater.close();
    expect(dialogs, 'no payload opened a dialog').toEqual([]);
  } finally {
    model.close();
  }
});
