// Quality control and the rater pool: a reviewer rejects a label and its item returns to the
// queue; a lead pauses a rater; an annotator labels three items from the keyboard alone.
//
// The tests share one promotion-priority run whose items all go to humans (a grader that never
// decides, no judges, every label drawn for review), so its items come first in every queue.
import {
  expect,
  jsonl,
  login,
  openSessionAs,
  test,
  TINY_DATASET,
  uniqueName,
  uploadDatasetDirectly,
  waitForHydration,
  waitForRunToFinish,
} from './helpers';
import type { Page } from '@playwright/test';

const NEVER_DECIDES = '{"kind": "regex_match", "pattern": "NEVER IN A REPLY (x)"}';

/** As a researcher: an eval whose items all reach humans, every label reviewed, launched as a
 * promotion decision; waits until its run is answered. */
async function launchReviewedRun(page: Page) {
  const dataset = uniqueName('qc-data');
  await uploadDatasetDirectly(page, dataset, jsonl(TINY_DATASET));
  const evalName = uniqueName('qc eval');
  await page.goto('/evals');
  await waitForHydration(page);
  const form = page.locator('form').filter({ has: page.getByRole('button', { name: 'Define eval' }) });
  await form.getByLabel('Name').fill(evalName);
  await form.getByLabel('Dataset').selectOption({ label: dataset });
  await form.getByLabel('Repetitions').fill('1');
  await form.getByLabel('Deterministic grader as JSON', { exact: false }).fill(NEVER_DECIDES);
  await form.getByRole('button', { name: 'Define eval' }).click();

  await page.getByRole('link', { name: evalName }).click();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Eval: ${evalName}`);
  await waitForHydration(page);
  await page.getByLabel('QC review rate').fill('1');
  await page.getByLabel('What changed and why').fill('review every label');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(page.getByTestId('policy-history').locator('tbody tr')).toHaveCount(1);

  await page.goto('/evals');
  await waitForHydration(page);
  const row = page.getByRole('row').filter({ has: page.getByRole('link', { name: evalName, exact: true }) });
  await row.getByLabel(`checkpoint for ${evalName}`).selectOption({ label: 'simulator/ckpt-a' });
  await row.getByLabel(`priority for ${evalName}`).selectOption('promotion');
  await row.getByRole('button', { name: 'Launch' }).click();
  await expect(page).toHaveURL(/\/runs\/\d+$/);
  const runId = Number(new URL(page.url()).pathname.split('/').pop());
  await waitForRunToFinish(page, runId);
  await expect(page.getByTestId('count-uncertain')).toHaveText(String(TINY_DATASET.length));
}

async function openQueue(page: Page) {
  await page.goto('/annotate');
  const task = page.getByTestId('task');
  await expect(task).toBeVisible();
  await waitForHydration(page);
  return (await task.getAttribute('data-task-id'))!;
}

test.describe.configure({ mode: 'serial' });

test('a reviewer rejects a label with a reason and the item returns to the queue', async ({ page, browser, browserLog }) => {
  await login(page, 'researcher');
  await launchReviewedRun(page);

  // The lead has not labelled before (so holds no lease): the first item is a promotion one.
  const rater = await openSessionAs(browser, 'lead', browserLog);
  const labelled = await openQueue(rater.page);
  await rater.page.keyboard.press('2');
  await expect(rater.page.getByTestId('notice')).toHaveText('Label saved.');
  await rater.close();

  const reviewer = await openSessionAs(browser, 'reviewer', browserLog);
  await reviewer.page.goto('/review');
  await expect(reviewer.page.getByTestId('review-label')).toHaveText('lead said fail');
  await waitForHydration(reviewer.page);
  // Rejecting needs a reason: without one the decision is refused.
  await reviewer.page.keyboard.press('x');
  await expect(reviewer.page.getByTestId('notice')).toContainText('say why');
  await reviewer.page.keyboard.press('r');
  await reviewer.page.keyboard.type('the reply never answers the question');
  await reviewer.page.keyboard.press('Escape');
  await reviewer.page.keyboard.press('x');
  await expect(reviewer.page.getByTestId('notice')).toHaveText('Decision saved.');

  // Back in the queue: the reviewer (who may label too, and has labelled nothing) is offered
  // the reopened item first, as the oldest promotion item with a free slot.
  expect(await openQueue(reviewer.page)).toBe(labelled);
  await reviewer.close();
});

test('a lead pauses a rater, who then gets no items until resumed', async ({ page, browser, browserLog }) => {
  await login(page, 'lead');
  await page.goto('/raters');
  await waitForHydration(page);
  const row = page.getByTestId('rater-annotator1');
  await row.getByRole('button', { name: 'Pause' }).click();
  await expect(row.getByTestId('rater-status')).toHaveText('paused');

  const rater = await openSessionAs(browser, 'annotator1', browserLog);
  await rater.page.goto('/annotate');
  await expect(rater.page.getByRole('alert')).toContainText('paused');

  await row.getByRole('button', { name: 'Resume' }).click();
  await expect(row.getByTestId('rater-status')).toHaveText('active');
  await rater.page.goto('/annotate');
  await expect(rater.page.getByTestId('task').or(rater.page.getByTestId('queue-empty'))).toBeVisible();
  await rater.close();
});

test('an annotator labels three items with the keyboard alone', async ({ page }) => {
  await login(page, 'annotator2');
  let shown: string | null = await openQueue(page);
  const labelled = new Set<string>();
  for (const key of ['1', '2', '1']) {
    expect(shown, 'the queue still has items').not.toBeNull();
    labelled.add(shown!);
    await page.keyboard.press(key);
    // The next item (or the empty-queue card) replaces the one just labelled.
    const next = page.getByTestId('task').or(page.getByTestId('queue-empty'));
    await expect(next).not.toHaveAttribute('data-task-id', shown!);
    await expect(page.getByTestId('notice')).toHaveText('Label saved.');
    const task = page.getByTestId('task');
    shown = (await task.count()) > 0 ? await task.getAttribute('data-task-id') : null;
  }
  expect(labelled.size).toBe(3);
});
