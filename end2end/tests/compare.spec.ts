// Comparing two runs of the same eval: scores, flip counts, and the outputs side by side.
import { DEMO_RUN_LABELS, expect, login, test, waitForRunToFinish } from './helpers';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('the demo runs compare with scores and consistent flip counts', async ({ page }) => {
  for (const runId of [1, 2]) expect(await waitForRunToFinish(page, runId)).toBe('completed');

  await page.goto('/runs');
  const picker = page.locator('form[action="/compare"]');
  await picker.getByLabel('Baseline').selectOption({ label: DEMO_RUN_LABELS[1] });
  await picker.getByLabel('Candidate').selectOption({ label: DEMO_RUN_LABELS[2] });
  await picker.getByRole('button', { name: 'Compare' }).click();

  await expect(page).toHaveURL(/\/compare\?baseline=1&candidate=2$/);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('Comparison: qa-basic exact match');
  const baseline = page.getByTestId('score-baseline');
  const candidate = page.getByTestId('score-candidate');
  await expect(baseline.getByRole('heading')).toHaveText('Baseline: simulator/ckpt-a');
  await expect(candidate.getByRole('heading')).toHaveText('Candidate: simulator/ckpt-b');
  await expect(baseline.locator('.big')).toHaveText(/^\d{1,3}\.\d%$/);
  await expect(candidate.locator('.big')).toHaveText(/^\d{1,3}\.\d%$/);

  // The demo sends uncertain answers to humans, so a finished run may still be partial: then it
  // says so, with its counts and the reason.
  for (const card of [baseline, candidate]) {
    const completeness = await card.getByTestId('completeness').innerText();
    expect(['COMPLETE', 'PARTIAL']).toContain(completeness);
    if (completeness === 'PARTIAL') await expect(card.locator('ul.problems')).toContainText('no final verdict yet');
  }
  const passToFail = Number(await page.getByTestId('pass-to-fail').innerText());
  const failToPass = Number(await page.getByTestId('fail-to-pass').innerText());
  expect(Number.isInteger(passToFail) && Number.isInteger(failToPass)).toBe(true);
  expect(passToFail + failToPass, 'two simulated checkpoints disagree somewhere').toBeGreaterThan(0);
  await expect(page.locator('table.paired tbody tr').first()).toContainText('all items');
  // The demo's three categories, drawn for both runs (a marker shape per run).
  const chart = page.getByTestId('rates-chart').locator('svg');
  await expect(chart).toBeVisible();
  await expect(chart).toContainText('Pass rate by category');

  // Every changed item is listed, regressions first; then filter to regressions only.
  const flips = page.locator('table.flips tbody tr');
  const changed = Number((await page.getByTestId('diff-count').innerText()).split(' ')[0]);
  expect(changed).toBeGreaterThanOrEqual(passToFail + failToPass);
  await expect(flips).toHaveCount(Math.min(changed, 50));
  expect(passToFail, 'the demo candidate regresses on some items').toBeGreaterThan(0);
  await expect(flips.first()).toContainText('pass → fail');
  await page.getByLabel('Change').selectOption('regression');
  await page.getByRole('button', { name: 'Filter' }).click();
  await expect(page).toHaveURL(/change=regression/);
  await expect(page.getByTestId('diff-count')).toContainText(`${passToFail} changed items match`);
  await expect(flips).toHaveCount(Math.min(passToFail, 50));
  await expect(flips.filter({ hasText: 'fail → pass' })).toHaveCount(0);

  // Each flip opens to show both runs' outputs next to each other.
  const first = flips.first();
  const outputs = first.locator('pre.output');
  await expect(outputs).toHaveCount(2);
  await expect(outputs.first()).toBeHidden();
  await first.locator('summary').click();
  await expect(outputs.nth(0)).toBeVisible();
  await expect(outputs.nth(1)).toBeVisible();
  await expect(first.getByRole('heading', { name: 'Baseline' })).toBeVisible();
  await expect(first.getByRole('heading', { name: 'Candidate' })).toBeVisible();
  const [left, right] = await Promise.all([outputs.nth(0).boundingBox(), outputs.nth(1).boundingBox()]);
  expect(right!.x, 'candidate output sits to the right of the baseline output').toBeGreaterThan(left!.x);
  await first.getByRole('button', { name: 'Show the first diverging token' }).click();
  await expect(first.locator('.divergence')).toContainText(/Token \d+, after|same token for token/);
});

test('comparing a run with itself is refused', async ({ page }) => {
  await page.goto('/compare?baseline=1&candidate=1');
  await expect(page.getByRole('alert')).toHaveText('pick two different runs to compare');
  await expect(page.getByTestId('score-baseline')).toHaveCount(0);
  await expect(page.getByRole('link', { name: 'Pick two runs' })).toHaveAttribute('href', '/runs');
});
