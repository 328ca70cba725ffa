// Multiple choice scored by likelihood: the researcher defines it with the eval form (the
// completions API, a choices field, likelihood scoring), previews the first scoring request,
// runs it on two simulated checkpoints and reads acc, acc_norm, acc_bytes and the probability
// on the right answer, then the paired test on the right answer's log-likelihood. The demo's
// perplexity suite scores whole texts by rolling likelihood: bits per byte and perplexities,
// and the paired bootstrap between checkpoints.
import { evalRow, expect, launchRun, login, openEvalForm, test, uniqueName, waitForHydration, waitForRunToFinish } from './helpers';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('a likelihood eval is defined, previewed, run and reported as lm-eval does', async ({ page }) => {
  const evalName = uniqueName('qa-choice by likelihood');
  const form = await openEvalForm(page, evalName, 'qa-choice');
  await form.getByText('System prompt, API, field mapping').click();
  await form.locator('select[name="options[api]"]').selectOption('completions');
  await form.getByLabel('Input field').fill('question');
  await form.getByLabel('Target field').fill('answer');
  await form.getByLabel('Choices field').fill('choices');
  await form.getByLabel('Category field').fill('subject');
  await form.getByTestId('prompt-template').fill('Question: {{ question }}\nAnswer:');
  await form.getByText('Scoring: generate an answer, the likelihood of each choice, or perplexity').click();
  await form.locator('select[name="options[scoring]"]').selectOption('likelihood');
  await form.locator('select[name="options[select_by]"]').selectOption('acc_norm');
  await form.getByRole('button', { name: 'Define eval' }).click();
  await expect(evalRow(page, evalName)).toContainText('exact_match@1');

  // The preview shows the first choice's scoring request: the prompt and the choice, echoed.
  await evalRow(page, evalName).getByRole('link', { name: evalName }).click();
  await waitForHydration(page);
  await page.getByTestId('preview-case').fill('mc-arith-001');
  await page.getByRole('button', { name: 'Preview request' }).click();
  const body = page.getByTestId('preview-body');
  await expect(body).toContainText('"echo": true');
  await expect(body).toContainText('Question: What is 17 + 25?\\nAnswer: 37');
  await expect(page.getByTestId('preview-note')).toContainText('one request per choice (4)');

  const baseline = await launchRun(page, evalName, 'simulator/ckpt-a');
  expect(await waitForRunToFinish(page, baseline)).toBe('completed');
  await expect(page.getByTestId('count-errors')).toHaveText('0');
  const metrics = page.getByTestId('likelihood-metrics');
  await expect(metrics).toContainText('verdicts follow acc_norm');
  for (const name of ['acc', 'acc_norm', 'acc_bytes', 'p_right', 'right_is_greedy', 'right_logprob']) {
    await expect(metrics.getByRole('row').filter({ has: page.getByRole('cell', { name, exact: true }) })).toHaveCount(1);
  }
  // Each answer is the letter of the likeliest choice per character.
  await expect(page.locator('table.results pre.output').first()).toHaveText(/^[A-D]$/);

  const candidate = await launchRun(page, evalName, 'simulator/ckpt-b');
  expect(await waitForRunToFinish(page, candidate)).toBe('completed');
  await page.goto(`/compare?baseline=${baseline}&candidate=${candidate}`);
  await expect(page.getByTestId('likelihood-test')).toContainText('Log-likelihood of the right answer');
  await expect(page.getByTestId('likelihood-test')).toContainText('15 items, paired t-test');
});

test('a perplexity eval is previewed, run and compared in bits per byte', async ({ page }) => {
  const evalName = 'prose perplexity';
  await page.goto('/evals');
  await waitForHydration(page);
  await evalRow(page, evalName).getByRole('link', { name: evalName }).click();
  await waitForHydration(page);
  // The first request a document sends is its tokenisation by the server.
  await page.getByTestId('preview-case').fill('river');
  await page.getByRole('button', { name: 'Preview request' }).click();
  await expect(page.getByTestId('preview-body')).toContainText('"add_special_tokens": false');
  await expect(page.getByTestId('preview-note')).toContainText('windows of at most 31 token ids');

  const baseline = await launchRun(page, evalName, 'simulator/ckpt-a');
  expect(await waitForRunToFinish(page, baseline)).toBe('completed');
  await expect(page.getByTestId('count-errors')).toHaveText('0');
  await expect(page.getByTestId('count-scored')).toHaveText('16');
  const metrics = page.getByTestId('rolling-metrics');
  await expect(metrics).toContainText('16 documents');
  for (const name of ['bits_per_byte', 'byte_perplexity', 'word_perplexity', 'token_perplexity']) {
    await expect(metrics.getByRole('row').filter({ has: page.getByRole('cell', { name, exact: true }) })).toHaveCount(1);
  }
  await expect(page.getByTestId('bits-per-byte')).toHaveText(/^0\.\d{4} bits per byte$/);
  await expect(page.locator('table.results pre.output').first()).toHaveText(/^log-likelihood -\d+\.\d{4} over \d+ tokens/);

  const candidate = await launchRun(page, evalName, 'simulator/ckpt-b');
  expect(await waitForRunToFinish(page, candidate)).toBe('completed');
  await page.goto(`/compare?baseline=${baseline}&candidate=${candidate}`);
  const paired = page.getByTestId('rolling-test');
  await expect(paired).toContainText('Bits per byte over the 16 documents both runs scored');
  await expect(paired).toContainText('paired bootstrap over documents');
});
