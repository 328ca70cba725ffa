// Logging in and out, and what each role may reach.
import { expect, login, LOGIN_FAILED, submitLogin, test, uniqueName } from './helpers';

test('a wrong password and an unknown username get the same message', async ({ page }) => {
  await submitLogin(page, 'researcher', 'not-the-password');
  await expect(page).toHaveURL(/\/login\?error=/);
  await expect(page.getByRole('alert')).toHaveText(LOGIN_FAILED);
  await expect(page.getByTestId('whoami')).toHaveCount(0);

  await submitLogin(page, uniqueName('nobody'), 'whatever-password');
  await expect(page).toHaveURL(/\/login\?error=/);
  await expect(page.getByRole('alert')).toHaveText(LOGIN_FAILED);
  await expect(page.getByTestId('whoami')).toHaveCount(0);
});

test('a researcher logs in, sees the research pages, and logs out', async ({ page }) => {
  await login(page, 'researcher');
  const nav = page.locator('header nav');
  for (const link of ['Datasets', 'Checkpoints', 'Evals', 'Runs']) {
    await expect(nav.getByRole('link', { name: link })).toBeVisible();
  }

  await page.getByRole('button', { name: 'Log out' }).click();
  await expect(page).toHaveURL('/login');
  await expect(page.getByTestId('whoami')).toHaveCount(0);

  // The session is gone: pages send the visitor back to the login form.
  await page.goto('/runs');
  await expect(page).toHaveURL('/login');
  await expect(page.getByRole('heading', { name: 'Sign in to Arbiter' })).toBeVisible();
});

test('anonymous visitors are sent to the login page', async ({ page }) => {
  for (const path of ['/', '/datasets', '/runs/1', '/annotate', '/compare?baseline=1&candidate=2']) {
    await page.goto(path);
    await expect(page, `GET ${path}`).toHaveURL('/login');
  }
});

test('an annotator sees no research pages and the server refuses them', async ({ page }) => {
  await login(page, 'annotator1');
  const nav = page.locator('header nav');
  await expect(nav.getByRole('link', { name: 'Annotate' })).toBeVisible();
  await expect(nav.getByRole('link', { name: 'Datasets' })).toHaveCount(0);
  await expect(nav.getByRole('link', { name: 'Runs' })).toHaveCount(0);

  // Hidden links are not security: typing the address gets the server's refusal.
  await page.goto('/datasets');
  await expect(page.getByRole('alert')).toContainText('your role (annotator) does not allow this');
  await expect(page.getByRole('table')).toHaveCount(0);

  // The upload route checks the role too.
  await page.getByLabel('Name').fill(uniqueName('annotator-upload'));
  await page.getByLabel('File').setInputFiles({
    name: 'sneaky.jsonl',
    mimeType: 'application/jsonl',
    buffer: Buffer.from('{"id": "a", "input": "q", "target": "t"}\n'),
  });
  await page.getByRole('button', { name: 'Upload' }).click();
  await expect(page).toHaveURL(/\/datasets\?error=/);
  await expect(
    page.getByRole('alert').filter({ hasText: 'your role (annotator) cannot upload datasets' }),
  ).toBeVisible();
});

test('an unknown page answers 404 and keeps the session', async ({ page }) => {
  await login(page, 'researcher');
  const response = await page.goto('/no-such-page');
  expect(response?.status()).toBe(404);
  await expect(page.getByRole('heading', { name: 'Page not found' })).toBeVisible();
  await expect(page.getByTestId('whoami')).toHaveText('researcher');
  const favicon = await page.request.get('/favicon.ico');
  expect(favicon.status(), 'favicon.ico: a file or a 404, never a server error').toBeLessThan(500);
});
