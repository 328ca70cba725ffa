// The grading path: judges with their calibration, an eval's versioned triage policy, and a
// run's decisions and cost by stage (the demo seeds two judges and a policy on its eval).
import { DEMO_EVAL, expect, login, test, uniqueName, waitForHydration } from './helpers';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('a judge may grade several answers per call, at most sixteen', async ({ page }) => {
  await page.goto('/judges');
  await waitForHydration(page);
  const name = uniqueName('batch-judge');
  await page.getByLabel('Name (saving an existing name adds a version)').fill(name);
  await page.getByLabel('Answers per call', { exact: false }).fill('17');
  // The browser's own check would stop the form; the server's is the one tested here.
  await page.locator('form').filter({ has: page.getByRole('button', { name: 'Save judge' }) })
    .evaluate((form) => form.setAttribute('novalidate', ''));
  await page.getByRole('button', { name: 'Save judge' }).click();
  await expect(page.getByRole('alert')).toContainText('between 1 and 16 answers per call');
  await expect(page.getByRole('link', { name: `judge:${name}@1` })).toHaveCount(0);
  await page.getByLabel('Answers per call', { exact: false }).fill('8');
  await page.getByRole('button', { name: 'Save judge' }).click();
  const row = page.getByRole('row').filter({ has: page.getByRole('link', { name: `judge:${name}@1` }) });
  await expect(row).toContainText('PASS or FAIL, 8 per call');
});

test('judges are listed with a reliability diagram, and a rubric without {output} is refused', async ({ page }) => {
  await page.goto('/judges');
  await waitForHydration(page);
  await expect(page.getByRole('link', { name: 'judge:qa-judge@1' })).toBeVisible();
  await expect(page.getByRole('link', { name: 'judge:qa-judge-strong@1' })).toBeVisible();

  const name = uniqueName('strict-judge');
  await page.getByLabel('Name (saving an existing name adds a version)').fill(name);
  await page.getByLabel('Rubric', { exact: false }).fill('Is it right? Reply PASS or FAIL.');
  await page.getByRole('button', { name: 'Save judge' }).click();
  await expect(page.getByRole('alert')).toContainText('{output}');
  await expect(page.getByRole('link', { name: `judge:${name}@1` })).toHaveCount(0);

  await page.getByLabel('Rubric', { exact: false }).fill('Answer:\n{output}\nReply PASS or FAIL first.');
  await page.getByRole('button', { name: 'Save judge' }).click();
  await expect(page.getByRole('link', { name: `judge:${name}@1` })).toBeVisible();

  // A second version gets a drift canary in the background against the first, which no
  // human has checked yet: the canary says so, on the list and on the version's page.
  await page.getByLabel('Name (saving an existing name adds a version)').fill(name);
  await page.getByLabel('Rubric', { exact: false }).fill('Be brief.\nAnswer:\n{output}\nReply PASS or FAIL first.');
  await page.getByRole('button', { name: 'Save judge' }).click();
  const second = page.getByRole('row').filter({ has: page.getByRole('link', { name: `judge:${name}@2` }) });
  await expect(second).toBeVisible();
  await expect(async () => {
    await page.reload();
    await expect(second.getByTestId('judge-canary')).toHaveText(
      `canary: judge:${name}@1 graded nothing humans checked`,
      { timeout: 1000 },
    );
  }).toPass({ timeout: 30_000 });
  await second.getByRole('link').click();
  await expect(page.getByTestId('canary')).toContainText(`Drift canary against judge:${name}@1`);
  await expect(page.getByTestId('canary-items')).toHaveText('0');
  await page.goto('/judges');
  await waitForHydration(page);

  // A judge on the demo rubric's four-point helpfulness scale; a pass/fail dimension is refused.
  const scaled = uniqueName('helpful-judge');
  await page.getByLabel('Name (saving an existing name adds a version)').fill(scaled);
  await page.getByLabel('Rubric', { exact: false }).fill('');
  await page.getByLabel('Scale from').selectOption('answer quality');
  await page.getByLabel('Dimension', { exact: false }).fill('correct');
  await page.getByRole('button', { name: 'Save judge' }).click();
  await expect(page.getByRole('alert')).toContainText('not an ordinal scale');
  await page.getByLabel('Dimension', { exact: false }).fill('helpful');
  await page.getByLabel('Passes from point', { exact: false }).fill('3');
  await page.getByRole('button', { name: 'Save judge' }).click();
  const row = page.getByRole('row').filter({ has: page.getByRole('link', { name: `judge:${scaled}@1` }) });
  await expect(row).toContainText(/answer quality v\d+: helpful, 1–4, passes at 3/);
  await row.getByRole('link').click();
  await expect(page.getByTestId('scale-calibration')).toContainText('On its scale');
  await expect(page.getByTestId('scale-items')).toHaveText('0');
  await expect(page.getByTestId('scale-confusion').locator('tbody tr')).toHaveCount(4);
  // The prompt was made from the dimension's anchors.
  await expect(page.locator('pre.output')).toContainText('4 — Excellent');

  await page.goto('/judges');
  await page.getByRole('link', { name: 'judge:qa-judge@1' }).click();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('judge:qa-judge@1');
  await expect(page.getByTestId('reliability-diagram').locator('svg')).toBeVisible();
  await expect(page.getByRole('table').filter({ hasText: "The diagram's numbers" }).locator('tbody tr')).toHaveCount(10);
  await expect(page.getByTestId('judge-cost')).toHaveText(/^\$\d+\.\d{4}$/);
});

test("an eval's triage policy is saved as versions, and a bad one is refused", async ({ page }) => {
  await page.goto('/evals');
  await page.getByRole('link', { name: DEMO_EVAL }).click();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Eval: ${DEMO_EVAL}`);
  await waitForHydration(page);
  await expect(page.getByTestId('policy-current')).toContainText('judge:qa-judge@1');
  const history = page.getByTestId('policy-history').locator('tbody tr');
  const versionsBefore = await history.count();
  expect(versionsBefore).toBeGreaterThanOrEqual(1);

  await page.getByLabel('Escalate threshold').fill('0.99');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(page.getByRole('alert').first()).toContainText('must not be above');
  await expect(history).toHaveCount(versionsBefore);

  await page.getByLabel('Escalate threshold').fill('0.8');
  await page.getByLabel('Accept threshold').fill('0.95');
  await page.getByLabel('What changed and why').fill('stricter acceptance');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(history).toHaveCount(versionsBefore + 1);
  await expect(history.first()).toContainText('stricter acceptance');
  await expect(page.getByTestId('policy-current')).toContainText('accept ≥ 0.950');

  // Re-tuning from human labels: bounds upside down are refused; good ones show with the
  // policy; clearing the target turns it off again (the demo's policy is left as it was).
  const tuning = page.getByTestId('auto-tuning');
  await tuning.getByLabel('Target error rate (%)').fill('5');
  await tuning.getByLabel('Lowest threshold allowed').fill('0.995');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(page.getByRole('alert').first()).toContainText('above the highest');
  await expect(history).toHaveCount(versionsBefore + 1);
  await tuning.getByLabel('Lowest threshold allowed').fill('0.9');
  await tuning.getByLabel('Judge floor (% right)').fill('70');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(history).toHaveCount(versionsBefore + 2);
  await expect(page.getByTestId('policy-current')).toContainText(
    're-tuned for at most 5.0% errors within accept [0.900, 0.990], judge floor 70%',
  );
  await tuning.getByLabel('Target error rate (%)').fill('');
  await page.getByRole('button', { name: 'Save as a new version' }).click();
  await expect(history).toHaveCount(versionsBefore + 3);
  await expect(page.getByTestId('policy-current')).not.toContainText('re-tuned');
});

test("a run shows who decided its items and what each stage cost", async ({ page }) => {
  await page.goto('/runs/1');
  const costs = page.getByTestId('run-costs');
  await expect(costs).toBeVisible();
  await expect(page.getByTestId('decided-by')).toContainText('deterministic');
  await expect(page.getByTestId('cost-total')).toHaveText(/^\d+\.\d{4}$/);
  expect(Number(await page.getByTestId('cost-total').innerText())).toBeGreaterThan(0);
});
