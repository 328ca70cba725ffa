// Items pushed from outside: a researcher pushes a production trace and a pair over the API
// (with a token made on the Account page), a rater labels both from the keyboard, reading the
// trace's markdown rendered and its hostile markup inert, and the researcher reads the outcomes
// back, with the pair's choice in the order pushed.
import type { Page } from '@playwright/test';
import { expect, expectMovedPast, invitedRater, login, test, uniqueName, waitForHydration } from './helpers';

const TRACE = [
  'Here is **the refund policy**:',
  '',
  '| days | refund |',
  '|------|--------|',
  '| <img src=x onerror="window.__xss = 1"> 30 | full |',
  '',
  '<script>window.__xss = 2</script>',
].join('\n');

/** Skips items until `found` holds for the one on screen (other specs' items may be ahead). */
async function moveOnUntil(rater: Page, found: () => Promise<boolean>) {
  const task = rater.getByTestId('task');
  for (let attempt = 0; attempt < 40 && (await task.count()) > 0 && !(await found()); attempt++) {
    const before = await task.getAttribute('data-claim');
    await rater.keyboard.press('s');
    await expectMovedPast(rater, before!);
  }
  expect(await task.count(), "the queue ran out before the spec's own item came up").toBe(1);
  expect(await found(), "the spec's own item came up").toBe(true);
}

test('items pushed over the API are labelled by raters and read back', async ({ page, browser, browserLog, request }) => {
  // A rater of this test's own, so its skips touch no other spec's items.
  await login(page, 'lead');
  const tracer = await invitedRater(page, browser, browserLog, 'tracer');

  // The researcher's token, and the push: a trace to label and a pair to compare.
  const researcher = await browser.newContext();
  const researcherPage = await researcher.newPage();
  await browserLog.watch(researcherPage);
  await login(researcherPage, 'researcher');
  await researcherPage.goto('/account');
  await waitForHydration(researcherPage);
  await researcherPage.getByLabel('Name').fill(uniqueName('pusher'));
  await researcherPage.getByRole('button', { name: 'Create token' }).click();
  const token = (await researcherPage.getByTestId('new-token').innerText()).trim();
  const headers = { Authorization: `Bearer ${token}` };
  const queue = uniqueName('prod-traces');
  const marker = uniqueName('trace');
  const push = {
    queue,
    priority: 'promotion',
    items: [
      { input: `Refund window? (${marker})`, outputs: [TRACE], metadata: { trace: marker } },
      { input: `Which greeting? (${marker})`, outputs: ['Good morning!', 'yo'], metadata: { trace: `${marker}-pair` } },
    ],
  };
  const pushed = await request.post('/api/v1/annotation/items', { headers, data: push });
  expect(pushed.status()).toBe(201);
  const again = await request.post('/api/v1/annotation/items', { headers, data: push });
  expect(again.status()).toBe(200);
  expect((await again.json()).existing).toBe(2);
  const refused = await request.post('/api/v1/annotation/items', {
    headers,
    data: { queue, items: [{ input: 'x', outputs: [] }] },
  });
  expect(refused.status()).toBe(400);
  expect((await refused.json()).error).toContain('item 0 has 0 outputs');

  // The rater labels the trace (pass) and the pair (the greeting).
  const rater = tracer.page;
  await rater.goto('/annotate');
  await expect(rater.getByTestId('task')).toBeVisible();
  await waitForHydration(rater);
  const input = rater.getByTestId('task-input');
  await moveOnUntil(rater, async () => (await input.textContent())!.includes(`Refund window? (${marker})`));
  const output = rater.getByTestId('task-output');
  await expect(output.locator('strong')).toHaveText('the refund policy');
  await expect(output.locator('table td').last()).toHaveText('full');
  expect(await rater.evaluate(() => (window as any).__xss)).toBeUndefined();
  await expect(rater.locator('.shown img, .shown script')).toHaveCount(0);
  const traceClaim = await rater.getByTestId('task').getAttribute('data-claim');
  await rater.keyboard.press('1');
  await expect(rater.getByTestId('notice')).toHaveText('Label saved.');
  // The next item is on screen before any key is pressed on it.
  await expect(rater.getByTestId('task')).not.toHaveAttribute('data-claim', traceClaim!);

  await moveOnUntil(rater, async () => (await input.textContent())!.includes(`Which greeting? (${marker})`));
  const a = (await output.textContent())!;
  // The greeting is the first output pushed; whichever side it was drawn on, choose it.
  await rater.keyboard.press(a.includes('Good morning!') ? 'a' : 'b');
  await expect(rater.getByTestId('notice')).toHaveText('Preference saved.');
  await tracer.close();

  // The researcher reads both outcomes back.
  const read = await request.get(`/api/v1/annotation/items?queue=${encodeURIComponent(queue)}`, { headers });
  expect(read.status()).toBe(200);
  const items = await read.json();
  expect(items).toHaveLength(2);
  expect(items[0].state).toBe('decided');
  expect(items[0].verdict).toBe('pass');
  expect(items[0].labels[0].rater).toBe(tracer.name);
  expect(items[1].kind).toBe('pair');
  expect(items[1].preferred_output).toBe(0);
  await researcher.close();
});
