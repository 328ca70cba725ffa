// Code evals: the demo's code problems completed by two simulated checkpoints, each answer run
// against the problem's tests in the sandbox, pass@k over the repetitions, and the failing
// test's evidence (the assertion, the traceback) where the two checkpoints differ.
import { evalRow, expect, launchRun, login, test, waitForRunToFinish } from './helpers';

const CODE_EVAL = 'code-basic tests in the sandbox';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('a code eval runs the tests in the sandbox and shows the failing test in the diff', async ({ page }) => {
  const baseline = await launchRun(page, CODE_EVAL, 'simulator/ckpt-a');
  const candidate = await launchRun(page, CODE_EVAL, 'simulator/ckpt-b');
  for (const runId of [baseline, candidate]) {
    expect(await waitForRunToFinish(page, runId)).toBe('completed');
    // Eight problems, three samples each; every answer is decided by its tests.
    await expect(page.getByTestId('count-errors')).toHaveText('0');
    await expect(page.getByTestId('count-uncertain')).toHaveText('0');
    const passed = Number(await page.getByTestId('count-pass').innerText());
    const failed = Number(await page.getByTestId('count-fail').innerText());
    expect(passed + failed).toBe(24);
    const metrics = page.getByTestId('sample-metrics');
    await expect(metrics.getByRole('row').filter({ hasText: 'pass@3' })).toHaveCount(1);
  }
  await page.goto(`/compare?baseline=${baseline}&candidate=${candidate}`);
  const flips = page.locator('table.flips tbody tr');
  expect(await flips.count(), 'the two checkpoints disagree on some answers').toBeGreaterThan(0);
  const first = flips.first();
  await first.locator('summary').click();
  // Regressions come first: the baseline's answer passed, the candidate's failed its tests.
  await expect(first).toContainText('pass → fail');
  const reasons = first.locator('ul.reasons');
  await expect(reasons).toHaveCount(2);
  const [passing, failing] = [reasons.nth(0), reasons.nth(1)];
  await expect(failing).toContainText('code_tests@1: fail');
  await expect(failing).toContainText(/the tests failed at `assert candidate\(.*\)`: AssertionError|NotImplementedError/);
  await expect(failing).toContainText('last lines of stderr');
  await expect(failing).toContainText('Traceback (most recent call last)');
  await expect(passing).toContainText("code_tests@1: pass — the item's tests passed");
});

test('HumanEval is offered as a code suite with five samples per problem', async ({ page }) => {
  test.skip(!process.env.ARBITER_TEST_HUMANEVAL, 'HumanEval was not fetched (scripts/fetch-humaneval)');
  await page.goto('/evals');
  await expect(evalRow(page, 'HumanEval pass@k')).toContainText('5 rep(s)');
  await page.goto('/datasets');
  await expect(page.getByRole('row').filter({ hasText: 'humaneval' })).toContainText('164');
});
