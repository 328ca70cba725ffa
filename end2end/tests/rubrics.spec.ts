// Rubrics: a lead defines a two-dimension rubric with guidelines; a researcher's eval asks it;
// an annotator answers it with the keyboard alone, the guidelines beside the item.
import { expect, jsonl, launchReviewedRun, login, openQueue, openSessionAs, test, TINY_DATASET, uniqueName, waitForHydration } from './helpers';
import type { Locator, Page } from '@playwright/test';

/** Skips what other specs left ahead of this spec's item until `found`. */
async function skipUntil(page: Page, found: Locator) {
  const task = page.getByTestId('task');
  for (let attempt = 0; attempt < 20 && (await found.count()) === 0; attempt++) {
    const before = await task.getAttribute('data-claim');
    await page.keyboard.press('s');
    await expect(task).not.toHaveAttribute('data-claim', before!);
  }
  await expect(found).toBeVisible();
}

test('a lead defines a rubric with guidelines and an annotator answers it from the keyboard', async ({ page, browser, browserLog }) => {
  const name = uniqueName('helpfulness');
  const definition = JSON.stringify({
    dimensions: [
      { key: 'correct', question: 'Is the final answer correct?', kind: 'binary' },
      {
        key: 'helpful',
        question: 'How helpful is the answer?',
        kind: 'ordinal',
        scale: [
          { label: 'Poor', description: 'Misses the question' },
          { label: 'Fair', description: 'Partly answers it' },
          { label: 'Good', description: 'Answers it' },
          { label: 'Great', description: 'Answers it clearly' },
        ],
      },
    ],
    verdict: { dimension: 'helpful', pass_at_least: 3 },
  });

  // The lead: a bad definition is refused with the reason, then the rubric and its guidelines.
  await login(page, 'lead');
  await page.goto('/rubrics');
  await waitForHydration(page);
  const form = page.getByTestId('rubric-form');
  await form.getByLabel('Rubric name').fill(name);
  await form.getByLabel('Definition (JSON)').fill('{"dimensions": []}');
  await form.getByRole('button', { name: 'Save rubric' }).click();
  await expect(form.getByRole('alert')).toContainText('1 to 16 dimensions');
  await form.getByLabel('Definition (JSON)').fill(definition);
  await form.getByRole('button', { name: 'Save rubric' }).click();
  await expect(form.getByTestId('rubric-saved')).toHaveText('Saved as version 1.');
  const card = page.locator(`[data-rubric="${name}"]`);
  await expect(card.getByTestId('dimensions').locator('tbody tr')).toHaveCount(2);
  await expect(card).toContainText('An item passes when `helpful` is at least 3 (Good).');
  const guidelines = page.getByTestId('guidelines-form');
  await guidelines.getByLabel('For rubric').fill(name);
  await guidelines.getByLabel('Guidelines (markdown)').fill('## Helpfulness\n\nA **Good** answer answers the question.\n\n| point | example |\n|---|---|\n| 3 | "4" for 2 + 2 |');
  await guidelines.getByRole('button', { name: 'Save guidelines' }).click();
  await expect(guidelines.getByTestId('guidelines-saved')).toHaveText('Saved as guidelines version 1.');
  await expect(card.getByTestId('rubric-guidelines')).toContainText('Guidelines, version 1');

  // The researcher's eval asks it; every item goes to one rater, unreviewed.
  const researcher = await openSessionAs(browser, 'researcher', browserLog);
  const runId = await launchReviewedRun(researcher.page, jsonl(TINY_DATASET.slice(0, 1)), 1, 'simulator/ckpt-a', {
    reviewRate: '0',
    rubric: name,
  });

  // The annotator: the rubric's keys, its guidelines, digits and arrows, Enter to submit.
  const rater = await openSessionAs(browser, 'annotator2', browserLog);
  await openQueue(rater.page);
  await skipUntil(rater.page, rater.page.locator(`[data-testid="rubric-form"][data-rubric="${name}"]`));
  await expect(rater.page.getByTestId('guidelines')).toContainText('A Good answer answers the question.');
  await expect(rater.page.getByTestId('guidelines').locator('table')).toBeVisible();
  await expect(rater.page.getByTestId('key-legend')).toContainText('pick a level of the focused dimension');
  const correct = rater.page.getByTestId('dimension-correct');
  const helpful = rater.page.getByTestId('dimension-helpful');
  await expect(correct).toHaveClass(/focused/);
  await rater.page.keyboard.press('2');
  await expect(correct.getByRole('button', { name: 'Fail' })).toHaveAttribute('aria-pressed', 'true');
  // Picking moved the focus on; the arrows move it back and forth.
  await expect(helpful).toHaveClass(/focused/);
  await rater.page.keyboard.press('ArrowUp');
  await expect(correct).toHaveClass(/focused/);
  await rater.page.keyboard.press('1');
  await expect(correct.getByRole('button', { name: 'Pass' })).toHaveAttribute('aria-pressed', 'true');
  await rater.page.keyboard.press('3');
  await expect(helpful.getByRole('button', { name: 'Good' })).toHaveAttribute('aria-pressed', 'true');
  await rater.page.keyboard.press('Enter');
  await expect(rater.page.getByTestId('notice')).toHaveText('Label saved.');
  await rater.close();

  // Good (3) passes: the run's one item is decided by the label.
  await researcher.page.goto(`/runs/${runId}`);
  await expect(researcher.page.getByTestId('count-uncertain')).toHaveText('0');
  // The run's judgments by dimension: the one item's answers.
  await expect(researcher.page.getByTestId('run-dimensions').getByTestId('dimension-helpful')).toContainText('3 (Good): 1 (100%)');
  await researcher.close();
});
