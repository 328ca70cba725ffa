// Trends along a training run and promotion decisions, on the demo's two checkpoints (steps
// 1000 and 2000 of the training run `sim-pretrain`).
import { expect, login, test, waitForRunToFinish } from './helpers';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('a researcher follows an eval along a training run and watches it', async ({ page }) => {
  for (const runId of [1, 2]) expect(await waitForRunToFinish(page, runId)).toBe('completed');

  await page.goto('/trends');
  await page.getByLabel('Eval').selectOption({ label: 'qa-basic exact match' });
  await page.getByLabel('Training run').selectOption('sim-pretrain');
  await page.getByLabel('Baseline').selectOption('first');
  await page.getByRole('button', { name: 'Show' }).click();
  await expect(page).toHaveURL(/\/trends\?eval=\d+&run=sim-pretrain&policy=first/);

  // One row per checkpoint in step order; the second is compared with the first.
  const rows = page.getByTestId('trend-table').locator('tbody tr');
  await expect(rows).toHaveCount(2);
  await expect(rows.nth(0)).toContainText('simulator/ckpt-a');
  await expect(rows.nth(0)).toContainText('step 1000');
  await expect(rows.nth(1)).toContainText('step 2000');
  // Only a complete report serves as a baseline; the demo's may wait for human labels.
  const firstComplete = (await rows.nth(0).locator('.badge').innerText()) === 'COMPLETE';
  if (firstComplete) {
    await expect(rows.nth(1).getByRole('link', { name: 'simulator/ckpt-a' })).toHaveAttribute(
      'href',
      /\/compare\?baseline=\d+&candidate=\d+/,
    );
    await expect(rows.nth(1).getByTestId('finding')).toHaveText(/regression|improvement|no significant change/);
  } else {
    await expect(rows.nth(1).getByTestId('finding')).toHaveText('no baseline yet: the first complete checkpoint');
  }
  const chart = page.getByTestId('trend-chart').locator('svg');
  await expect(chart).toContainText('Pass rate over training');
  await expect(chart).toContainText('2000');

  // Flaky prompts: the demo's two checkpoints disagree on some items.
  const flaky = page.getByTestId('flaky-table').locator('tbody tr');
  await expect(flaky.first()).toBeVisible();
  await expect(flaky.first().locator('td').nth(3)).toHaveText(/^[1-9]\d*$/);

  await page.getByRole('button', { name: 'Watch for regressions' }).click();
  await expect(page.getByRole('button', { name: 'Stop watching' })).toBeVisible();
  await expect(page.getByText('qa-basic exact match · sim-pretrain · first')).toBeVisible();
  await page.getByRole('button', { name: 'Stop watching' }).click();
  await expect(page.getByRole('button', { name: 'Watch for regressions' })).toBeVisible();
});

test('a promotion decision is recorded only on two complete reports', async ({ page }) => {
  for (const runId of [1, 2]) expect(await waitForRunToFinish(page, runId)).toBe('completed');
  await page.goto('/compare?baseline=1&candidate=2');
  await expect(page.getByTestId('score-candidate').getByRole('heading')).toHaveText('Candidate: simulator/ckpt-b');
  const complete = await Promise.all(
    ['score-baseline', 'score-candidate'].map(async (id) => (await page.getByTestId(id).getByTestId('completeness').innerText()) === 'COMPLETE'),
  );
  const promotion = page.getByTestId('promotion');
  await promotion.getByLabel('Reject it').check();
  await promotion.getByLabel('Note').fill('judged on the demo');
  await promotion.getByRole('button', { name: 'Record decision' }).click();
  if (complete.every(Boolean)) {
    await expect(promotion.getByTestId('decisions')).toContainText('reject simulator/ckpt-b against simulator/ckpt-a by researcher');
  } else {
    await expect(promotion.getByRole('alert')).toContainText('a promotion decision needs two complete reports');
    await expect(promotion.getByText('No decision recorded yet.')).toBeVisible();
  }
  // The outcome mix of both runs is drawn beside the scores.
  await expect(page.getByTestId('outcome-chart').locator('svg')).toContainText('Outcome mix by run');
});
