// The annotator's path: label and skip items from the keyboard; the researcher sees the labels.
import { expect, login, openQueue, openSessionAs, test, uncertainCount } from './helpers';
import type { Page } from '@playwright/test';

/** The demo's runs, whose uncertain results fill the human queue. */
const DEMO_RUNS = [1, 2];

async function totalUncertain(page: Page) {
  let total = 0;
  for (const runId of DEMO_RUNS) total += await uncertainCount(page, runId);
  return total;
}

/** Waits until the claim on screen is no longer `previous`; returns the new claim's handle, or
 * `null` when the queue-empty card is shown instead. */
async function expectMovedOn(page: Page, previous: string) {
  const shown = page.getByTestId('task').or(page.getByTestId('queue-empty'));
  await expect(shown).not.toHaveAttribute('data-claim', previous);
  const task = page.getByTestId('task');
  return (await task.count()) > 0 ? await task.getAttribute('data-claim') : null;
}

test('two raters pressing 1 on one item decide it, and the researcher sees one fewer awaiting review', async ({
  page,
  browser,
  browserLog,
}) => {
  const researcher = await openSessionAs(browser, 'researcher', browserLog);
  const uncertainBefore = await totalUncertain(researcher.page);
  expect(uncertainBefore, 'the demo runs sent items to human review').toBeGreaterThanOrEqual(2);

  // The demo policy asks two raters per item: one label does not decide it yet.
  await login(page, 'annotator1');
  const labelled = await openQueue(page);
  await page.keyboard.press('1');
  await expect(page.getByTestId('notice')).toHaveText('Label saved.');
  await expectMovedOn(page, labelled.claim);
  expect(await totalUncertain(researcher.page)).toBe(uncertainBefore);

  // The queue hands out the oldest item with a free slot: the second rater gets the same one,
  // under a handle of their own.
  const second = await openSessionAs(browser, 'annotator2', browserLog);
  const secondShown = await openQueue(second.page);
  expect(secondShown.content).toBe(labelled.content);
  expect(secondShown.claim).not.toBe(labelled.claim);
  await second.page.keyboard.press('1');
  await expect(second.page.getByTestId('notice')).toHaveText('Label saved.');
  await second.close();

  // Two passes replaced the grader's "uncertain" verdict on one result of the demo runs.
  expect(await totalUncertain(researcher.page)).toBe(uncertainBefore - 1);
  await researcher.close();
});

test('pressing s skips the item and shows another', async ({ page }) => {
  await login(page, 'annotator1');
  const skipped = await openQueue(page);
  await page.keyboard.press('s');
  await expect(page.getByTestId('notice')).toHaveText('Skipped.');
  const next = await expectMovedOn(page, skipped.claim);
  expect(next, 'the queue had another item').not.toBeNull();

  // The item now held stays held across a reload, under the same handle (the store stories
  // check that a skipped item never returns to the rater who skipped it).
  await page.reload();
  await expect(page.getByTestId('task')).toHaveAttribute('data-claim', next!);
});

test('a skip after a label says "Skipped."', async ({ page }) => {
  await login(page, 'annotator1');
  const labelled = await openQueue(page);
  await page.keyboard.press('1');
  await expect(page.getByTestId('notice')).toHaveText('Label saved.');
  const skipped = await expectMovedOn(page, labelled.claim);
  expect(skipped, 'the queue had another item').not.toBeNull();

  await page.keyboard.press('s');
  await expect(page.getByTestId('notice')).toHaveText('Skipped.');
  await expectMovedOn(page, skipped!);
});

test('a rationale can be typed without the keys firing shortcuts', async ({ page }) => {
  await login(page, 'annotator2');
  const { claim } = await openQueue(page);
  const task = page.getByTestId('task');

  // `r` focuses the rationale box; the digits and letters typed there are text, not labels.
  await page.keyboard.press('r');
  const rationale = page.getByLabel('Rationale (optional)');
  await expect(rationale).toBeFocused();
  await page.keyboard.type('1 s 2 f looks right');
  await expect(rationale).toHaveValue('1 s 2 f looks right');
  await expect(page.getByTestId('notice')).toHaveCount(0);
  await expect(task).toHaveAttribute('data-claim', claim);

  // Escape leaves the box, and then the keys label again.
  await page.keyboard.press('Escape');
  await expect(rationale).not.toBeFocused();
  await page.keyboard.press('2');
  await expect(page.getByTestId('notice')).toHaveText('Label saved.');
  await expectMovedOn(page, claim);
});
