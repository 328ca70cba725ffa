// Side-by-side preference: a researcher sends pairs of two checkpoints' answers from the Compare
// page, a rater answers them with the keyboard (a, b, t; a pair compared per rubric dimension
// row by row), and the researcher reads the Bradley–Terry ratings (overall and per dimension),
// win rates and position bias.
import { expect, expectMovedPast, invitedRater, login, openSessionAs, test, uniqueName, waitForHydration, waitForRunToFinish } from './helpers';
import type { Page } from '@playwright/test';

/** Skips single items until a pair is on screen (other specs' items may be ahead of it). */
async function nextPair(rater: Page) {
  const task = rater.getByTestId('task');
  const right = rater.getByTestId('task-output-b');
  for (let attempt = 0; attempt < 40 && (await right.count()) === 0; attempt++) {
    const before = await task.getAttribute('data-claim');
    await rater.keyboard.press('s');
    await expect(task).not.toHaveAttribute('data-claim', before!);
  }
  await expect(right).toBeVisible();
  await expect(rater.getByTestId('task-output')).toBeVisible();
}

test('a researcher sends pairs from Compare, a rater answers with keys, and the ratings are read', async ({ page, browser, browserLog }) => {
  // A lead invites a rater of this test's own, so its skips touch no other spec's queue.
  await login(page, 'lead');
  const judge = await invitedRater(page, browser, browserLog, 'judge');

  // The researcher: a bad number is refused with the reason, then three random pairs.
  const researcher = await openSessionAs(browser, 'researcher', browserLog);
  for (const runId of [1, 2]) expect(await waitForRunToFinish(researcher.page, runId)).toBe('completed');
  await researcher.page.goto('/compare?baseline=1&candidate=2');
  await waitForHydration(researcher.page);
  const form = researcher.page.getByTestId('send-pairs-2');
  await form.getByText('Send pairs to raters').click();
  await form.getByLabel('Which cases').selectOption('random');
  await form.getByLabel('Pairs').fill('0');
  await form.getByRole('button', { name: 'Send pairs' }).click();
  await expect(form.getByRole('alert')).toContainText('from 1 to 5000');
  await form.getByLabel('Pairs').fill('3');
  await form.getByLabel('Note').fill('tone check');
  await form.getByRole('button', { name: 'Send pairs' }).click();
  await expect(form.getByTestId('pairs-sent')).toContainText('Sent 3 pairs');

  // The rater answers three pairs from the keyboard.
  const rater = judge.page;
  await rater.goto('/annotate');
  await expect(rater.getByTestId('task')).toBeVisible();
  await waitForHydration(rater);
  for (const key of ['a', 'b', 't']) {
    await nextPair(rater);
    // Blind: two outputs as A and B, no checkpoint named, the pair's own keys in the legend.
    await expect(rater.getByRole('heading', { name: 'Output A' })).toBeVisible();
    await expect(rater.getByRole('heading', { name: 'Output B' })).toBeVisible();
    await expect(rater.getByTestId('task')).not.toContainText('ckpt-');
    await expect(rater.getByTestId('key-legend')).toContainText('A is better');
    const claim = await rater.getByTestId('task').getAttribute('data-claim');
    await rater.keyboard.press(key);
    await expect(rater.getByTestId('notice')).toHaveText('Preference saved.');
    await expectMovedPast(rater, claim!);
  }

  // One more pair, compared on each dimension of the demo rubric: the rater answers the rows
  // with the same keys (arrows move between them), and the overall row sends the answers.
  await form.getByLabel('Pairs').fill('1');
  await form.getByLabel('Note').fill('per dimension');
  await form.getByLabel('Per dimension of rubric').fill('answer quality');
  await form.getByRole('button', { name: 'Send pairs' }).click();
  await expect(form.getByTestId('pairs-sent')).toContainText('Sent 1 pairs');
  // After the last answer the page shows another spec's item (skipped below) or an empty queue,
  // which is asked again once, now that the pair is sent.
  const emptyQueue = rater.getByTestId('queue-empty');
  await expect(rater.getByTestId('task').or(emptyQueue)).toBeVisible();
  if (await emptyQueue.isVisible()) {
    await rater.keyboard.press('n');
    await expect(rater.getByTestId('task')).toBeVisible();
  }
  await nextPair(rater);
  const rows = rater.getByTestId('pair-dimension');
  await expect(rows).toHaveCount(4);
  await expect(rater.getByTestId('guidelines')).toBeVisible();
  // Overall first is refused: every dimension needs a choice.
  await rater.keyboard.press('ArrowDown');
  await rater.keyboard.press('ArrowDown');
  await rater.keyboard.press('ArrowDown');
  await rater.keyboard.press('a');
  await expect(rater.getByTestId('notice')).toContainText('first');
  for (const key of ['a', 'b', 't']) await rater.keyboard.press(key);
  await expect(rows.nth(0).getByTestId('pair-dimension-choice')).toHaveText('A is better');
  await expect(rows.nth(1).getByTestId('pair-dimension-choice')).toHaveText('B is better');
  await expect(rows.nth(2).getByTestId('pair-dimension-choice')).toHaveText('tie');
  await rater.keyboard.press('a');
  await expect(rater.getByTestId('notice')).toHaveText('Preference saved.');
  await judge.close();

  // The researcher reads the ratings of both checkpoints and the position bias.
  await researcher.page.goto('/preferences');
  const report = researcher.page.getByTestId('preference-report').filter({ hasText: 'qa-basic exact match' });
  await expect(report).toBeVisible();
  const ratings = report.getByTestId('ratings').getByTestId('rating-row');
  await expect(ratings).toHaveCount(2);
  await expect(ratings.filter({ hasText: 'simulator/ckpt-a' })).toHaveCount(1);
  await expect(ratings.filter({ hasText: 'simulator/ckpt-b' })).toHaveCount(1);
  await expect(ratings.first()).toContainText(/\d{3,4}\s*\d{3,4} – \d{3,4}/);
  const everyone = report.getByTestId('position-bias').locator('tbody tr').first();
  await expect(everyone).toContainText('everyone');
  await expect(report.getByTestId('position-bias')).toContainText(judge.name);
  await expect(report.getByTestId('win-rates').locator('tbody tr')).toHaveCount(1);
  const perDimension = report.getByTestId('dimension-ratings');
  await expect(perDimension.getByTestId('dimension-rating-row').filter({ hasText: 'helpful' })).toHaveCount(2);
  const requests = researcher.page.getByTestId('pair-requests');
  await expect(requests.locator('tbody tr').filter({ hasText: 'tone check' }).first()).toContainText('random');
  await researcher.close();
});

test('a pairwise judge is asked first, and the pairs it decides need no rater', async ({ page }) => {
  await login(page, 'researcher');
  await page.goto('/judges');
  await waitForHydration(page);
  const name = uniqueName('which');
  await page.getByLabel('Name (saving an existing name adds a version)').fill(name);
  await page.getByLabel('Checkpoint').selectOption({ label: 'simulator/judge' });
  await page.getByLabel('Pairwise', { exact: false }).check();
  await page.getByRole('button', { name: 'Save judge' }).click();
  const row = page.getByRole('row').filter({ has: page.getByRole('link', { name: `judge:${name}@1` }) });
  await expect(row).toContainText('A, B or TIE on two answers');

  // Six pairs with the judge first; at a threshold of one half the simulated judge (whose two
  // orders agree) decides every pair but the audit share.
  await page.goto('/compare?baseline=1&candidate=2');
  await waitForHydration(page);
  const form = page.getByTestId('send-pairs-2');
  await form.getByText('Send pairs to raters').click();
  await form.getByLabel('Which cases').selectOption('random');
  await form.getByLabel('Pairs').fill('6');
  await form.getByLabel('Note').fill('judged first');
  await form.getByLabel('Pairwise judge first').selectOption({ label: `judge:${name}@1` });
  await form.getByLabel('decides from confidence').fill('0.5');
  await form.getByRole('button', { name: 'Send pairs' }).click();
  await expect(form.getByTestId('pairs-sent')).toContainText('Sent 6 pairs');

  // The background job judges them: the request says how many the judge decided alone, and the
  // judge's calibration counts every pair it judged.
  await page.goto('/preferences');
  const request = page.getByTestId('pair-requests').locator('tbody tr').filter({ hasText: 'judged first' }).first();
  const calibration = page.getByTestId('pairwise-calibration-row').filter({ hasText: `judge:${name}@1` });
  await expect(async () => {
    await page.reload();
    await expect(calibration.locator('td').nth(1)).toHaveText('6', { timeout: 1000 });
  }).toPass({ timeout: 30_000 });
  await expect(request).toContainText(new RegExp(`judge:${name}@1: decided [1-6] alone`));
  await expect(calibration.locator('td').nth(2)).toHaveText(/^\d+\.\d%$/);
});
