// Operating Arbiter: API tokens, checkpoints that trigger suites (from the form, the API and
// the watched folder), the System page's health figures, alert rules, retention and webhooks.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEMO_EVAL, expect, login, test, uniqueName, waitForHydration } from './helpers';

const SIM = 'http://127.0.0.1:8101/v1';

test('a researcher makes an API token, uses it, and revokes it', async ({ page, request }) => {
  await login(page, 'researcher');
  await page.goto('/account');
  await waitForHydration(page);
  const name = uniqueName('ci-token');
  await page.getByLabel('Name').fill(name);
  await page.getByRole('button', { name: 'Create token' }).click();
  const token = (await page.getByTestId('new-token').innerText()).trim();
  expect(token).toMatch(/^arb_[A-Za-z0-9]{40}$/);

  const me = await request.get('/api/v1/me', { headers: { Authorization: `Bearer ${token}` } });
  expect(me.status()).toBe(200);
  expect((await me.json()).role).toBe('researcher');

  const row = page.getByTestId('tokens').locator('tr', { hasText: name });
  await expect(row).toContainText(token.slice(0, 12));
  await expect(row).toContainText('live');
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row).toContainText('revoked');
  const refused = await request.get('/api/v1/me', { headers: { Authorization: `Bearer ${token}` } });
  expect(refused.status()).toBe(401);
  // The page never shows the token again.
  await page.reload();
  await expect(page.getByText(token)).toHaveCount(0);
});

test('new checkpoints of a training run launch its smoke suite', async ({ page, request }) => {
  await login(page, 'researcher');
  await page.goto('/checkpoints');
  await waitForHydration(page);
  // The demo's own smoke suite follows `sim-pretrain`; this test uses a training run of its
  // own, so the demo's trend stays as the trends spec expects.
  const suites = page.getByTestId('suites');
  await expect(suites.locator('tr', { hasText: 'demo-smoke' })).toContainText('every checkpoint');
  const trainingRun = uniqueName('pretrain');
  const smoke = uniqueName('smoke');
  await page.getByText('Add a suite').click();
  await page.getByLabel('Suite name').fill(smoke);
  await page.getByLabel('Suite training run (empty: any)').fill(trainingRun);
  await suites.getByLabel(DEMO_EVAL).check();
  await page.getByRole('button', { name: 'Add suite' }).click();
  await expect(suites.locator('tr', { hasText: smoke })).toContainText(trainingRun);

  // Registered in the form, as a promotion candidate.
  const fromForm = uniqueName('step-form');
  await page.getByLabel('Name', { exact: true }).fill(fromForm);
  await page.getByLabel('Endpoint URL (OpenAI-compatible)').fill(SIM);
  await page.getByLabel('Served model name').fill('sim-ckpt-a');
  await page.getByLabel('Training run (optional)').fill(trainingRun);
  await page.getByLabel('Training step (optional)').fill('3000');
  await page.getByLabel('Decision value (priority of its suites\' runs)').selectOption('promotion');
  await page.getByRole('button', { name: 'Register' }).click();
  const launches = page.getByTestId('suite-launches');
  await expect(launches.locator('tr', { hasText: fromForm })).toContainText('smoke suite: every checkpoint');
  await expect(launches.locator('tr', { hasText: fromForm })).toContainText(smoke);

  // Announced by a training job through the API.
  await page.goto('/account');
  await waitForHydration(page);
  await page.getByLabel('Name').fill(uniqueName('announcer'));
  await page.getByRole('button', { name: 'Create token' }).click();
  const token = (await page.getByTestId('new-token').innerText()).trim();
  const fromApi = uniqueName('step-api');
  const announced = await request.post('/api/v1/checkpoints', {
    headers: { Authorization: `Bearer ${token}` },
    data: { name: fromApi, endpoint_url: SIM, model: 'sim-ckpt-b', training_run: trainingRun, training_step: 4000 },
  });
  expect(announced.status()).toBe(201);
  const body = await announced.json();
  expect(body.runs.map((run: { suite: string }) => run.suite)).toEqual([smoke]);

  // Dropped into the watched folder.
  const fromFolder = uniqueName('step-folder');
  const folder = join(process.env.ARBITER_E2E_DATA_DIR!, 'announcements');
  writeFileSync(
    join(folder, `${fromFolder}.json`),
    JSON.stringify({ name: fromFolder, endpoint_url: SIM, model: 'sim-ckpt-a', training_run: trainingRun, training_step: 5000 }),
  );
  await expect(async () => {
    await page.goto('/checkpoints');
    await expect(page.getByTestId('suite-launches').locator('tr', { hasText: fromFolder })).toBeVisible();
  }).toPass({ timeout: 30_000 });

  // A full suite, run on demand.
  await page.goto('/checkpoints');
  await waitForHydration(page);
  const full = uniqueName('full');
  await page.getByText('Add a suite').click();
  await page.getByLabel('Suite name').fill(full);
  await page.getByLabel('Suite tier').selectOption('full');
  await page.getByLabel('Full suites: every Nth checkpoint (0: on demand)').fill('0');
  await page.getByLabel('Suite training run (empty: any)').fill(trainingRun);
  await suites.getByLabel(DEMO_EVAL).check();
  await page.getByRole('button', { name: 'Add suite' }).click();
  await expect(suites.locator('tr', { hasText: full })).toContainText('on demand only');
  await page.getByRole('combobox', { name: 'Suite', exact: true }).selectOption(full);
  await page.getByLabel('on checkpoint').selectOption({ label: fromForm });
  await page.getByRole('button', { name: 'Run', exact: true }).click();
  await expect(page.getByTestId('suite-outcome')).toContainText(DEMO_EVAL);
  await expect(launches.locator('tr', { hasText: full })).toContainText('on demand');
});

test('leads read system health, tune alert rules and retention, and add a webhook', async ({ page }) => {
  await login(page, 'lead');
  await page.goto('/system');
  await waitForHydration(page);
  await expect(page.getByTestId('queue-depth')).toHaveText(/^\d+$/);
  await expect(page.getByTestId('live-workers')).toHaveText(/^[1-9]\d*$/);
  await expect(page.getByTestId('answers-last-hour')).toHaveText(/^[1-9]\d*$/);
  await expect(page.getByTestId('queue-health').locator('svg')).toContainText('Identities waiting and claimed');
  await expect(page.getByTestId('answers-health').locator('svg')).toContainText('Answer latency');
  await expect(page.getByTestId('endpoints')).toContainText('127.0.0.1:8101');
  await expect(page.getByTestId('costs')).toContainText(DEMO_EVAL);

  const rules = page.getByTestId('alert-rules');
  await expect(rules.getByLabel('p99 latency above')).toHaveValue('30');
  await rules.getByLabel('Error rate above').fill('150%');
  await rules.getByRole('button', { name: 'Save thresholds' }).click();
  await expect(rules.getByRole('alert')).toContainText('the error rate must be a number');
  await rules.getByLabel('Error rate above').fill('10%');
  // Time to results: a target per suite tier, shown with its attainment.
  await expect(rules.getByLabel("Smoke suites' results within")).toHaveValue('1');
  await rules.getByLabel("Full suites' results within").fill('12');
  await rules.getByRole('button', { name: 'Save thresholds' }).click();
  await expect(rules.getByRole('status')).toContainText('Thresholds saved');
  await page.reload();
  await expect(page.getByTestId('alert-rules').getByLabel('Error rate above')).toHaveValue('0.1');
  await expect(page.getByTestId('alert-rules').getByLabel("Full suites' results within")).toHaveValue('12');
  const results = page.getByTestId('time-to-results');
  await expect(results.getByTestId('results-smoke').locator('td').nth(1)).toHaveText('1 h');
  await expect(results.getByTestId('results-full').locator('td').nth(1)).toHaveText('12 h');

  const retention = page.getByTestId('retention');
  await waitForHydration(page);
  await retention.getByLabel('Summaries kept').fill('10');
  await retention.getByRole('button', { name: 'Save' }).click();
  await expect(retention.getByRole('alert')).toContainText('at least as long as raw answers');

  const webhooks = page.getByTestId('webhooks');
  await webhooks.getByText('Add a webhook').click();
  const receiver = `http://127.0.0.1:9/${uniqueName('hook')}`;
  await webhooks.getByLabel('Receiver URL').fill(receiver);
  await webhooks.getByRole('button', { name: 'Add webhook' }).click();
  await expect(webhooks.getByRole('status')).toContainText('added');
  await expect(webhooks.locator('tr', { hasText: receiver })).toContainText('run.completed');
});

test('annotators have no System page', async ({ page }) => {
  await login(page, 'annotator1');
  await expect(page.getByRole('link', { name: 'System' })).toHaveCount(0);
  await page.goto('/system');
  await expect(page.getByRole('alert')).toContainText('does not allow');
});
