// Prompt shapes beyond one template: a conversation written as a message list, and items with
// images that go out with their question and are shown beside it in the per-item diff.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import {
  openEvalForm,
  evalRow,
  expect,
  jsonl,
  launchRun,
  login,
  test,
  TINY_DATASET,
  uniqueName,
  uploadDatasetDirectly,
  waitForHydration,
  waitForRunToFinish,
} from './helpers';

/** A 1×1 transparent PNG. */
const PIXEL =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('an eval written as a message list is checked as typed and sends those messages', async ({ page }) => {
  const dataset = uniqueName('tiny');
  await uploadDatasetDirectly(page, dataset, jsonl(TINY_DATASET));
  const evalName = uniqueName('message list');
  const form = await openEvalForm(page, evalName, dataset);
  await form.getByText('Or write the prompt as a message list').click();
  await form.getByRole('button', { name: '+ system' }).click();
  await form.getByLabel('message 1', { exact: true }).fill('Reply in one line.');
  await form.getByRole('button', { name: '+ user' }).click();
  await form.getByLabel('message 2', { exact: true }).fill('Question: {{ input }}');
  // Each row shows its own role.
  await expect(form.getByLabel('role of message 1')).toHaveValue('system');
  await expect(form.getByLabel('role of message 2')).toHaveValue('user');
  // While the list has messages, it is the prompt: the template box is set aside.
  await expect(form.getByTestId('prompt-template')).toBeDisabled();
  const sample = page.getByTestId('prompt-sample');
  await expect(sample).toContainText('[system]\nReply in one line.');
  await expect(sample).toContainText('[user]\nQuestion: What is 2 + 2?');
  // A list that does not end with the user's message is refused as typed.
  await form.getByRole('button', { name: '+ assistant' }).click();
  await expect(page.getByTestId('prompt-problem')).toContainText('must end with a user message');
  await form.getByRole('button', { name: 'Remove' }).nth(2).click();
  await expect(sample).toContainText('[user]\nQuestion: What is 2 + 2?');
  await form.getByRole('button', { name: 'Define eval' }).click();
  await expect(evalRow(page, evalName)).toBeVisible();

  await evalRow(page, evalName).getByRole('link', { name: evalName }).click();
  await waitForHydration(page);
  await page.getByTestId('preview-case').fill('tiny-3');
  await page.getByLabel('Checkpoint').selectOption({ label: 'simulator/ckpt-a' });
  await page.getByRole('button', { name: 'Preview request' }).click();
  const body = page.getByTestId('preview-body');
  await expect(body).toContainText('"content": "Reply in one line."');
  await expect(body).toContainText('"content": "Question: How many legs does a spider have?"');
});

test('items with images are sent with their question and shown in the per-item diff', async ({ page }) => {
  // The sample questions the simulator answers, each with a picture.
  const samples = readFileSync(resolve(__dirname, '../../public/samples/qa-basic.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.stringify({ ...JSON.parse(line), picture: PIXEL }));
  const dataset = uniqueName('pictured');
  await uploadDatasetDirectly(page, dataset, samples.join('\n') + '\n');
  const evalName = uniqueName('with pictures');
  const form = await openEvalForm(page, evalName, dataset);
  await form.getByText('System prompt, API, field mapping').click();
  await form.getByLabel(/^Images field/).fill('picture');
  await expect(page.getByTestId('prompt-sample')).toContainText('[1 image]');
  await form.getByRole('button', { name: 'Define eval' }).click();
  await expect(evalRow(page, evalName)).toBeVisible();

  const baseline = await launchRun(page, evalName, 'simulator/ckpt-a');
  expect(await waitForRunToFinish(page, baseline)).toBe('completed');
  const candidate = await launchRun(page, evalName, 'simulator/ckpt-b');
  expect(await waitForRunToFinish(page, candidate)).toBe('completed');
  await expect(page.getByTestId('count-errors')).toHaveText('0');

  await page.goto(`/compare?baseline=${baseline}&candidate=${candidate}`);
  await waitForHydration(page);
  const firstChange = page.locator('tr.flip').first();
  await firstChange.locator('summary').click();
  const image = firstChange.getByTestId('item-images').locator('img');
  await expect(image).toHaveCount(1);
  await expect(image).toHaveAttribute('src', PIXEL);
  await expect(image).toBeVisible();
});
