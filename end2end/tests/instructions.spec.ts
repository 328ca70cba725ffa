// Instruction following as IFEval checks it: the researcher picks the instructions grader in
// the eval form for the demo's instruction suite, runs it on a simulated checkpoint, and reads
// IFEval's four accuracies and the instructions least followed; each answer's grade names the
// instructions it missed.
import { evalRow, expect, launchRun, login, openEvalForm, test, uniqueName, waitForRunToFinish } from './helpers';

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('an instruction-following eval is defined, run and reported as IFEval does', async ({ page }) => {
  const evalName = uniqueName('instructions-basic');
  const form = await openEvalForm(page, evalName, 'instructions-basic');
  await form.getByText('System prompt, API, field mapping').click();
  await form.getByLabel('Input field').fill('prompt');
  await form.getByLabel('Target field').fill('response');
  await form.getByLabel('Category field').fill('category');
  await form.getByTestId('prompt-template').fill('{{ prompt }}');
  await form.locator('select[name="options[grader_kind]"]').selectOption('instructions');
  await form.getByRole('button', { name: 'Define eval' }).click();
  await expect(evalRow(page, evalName)).toContainText('instructions@1');

  const run = await launchRun(page, evalName, 'simulator/ckpt-b');
  expect(await waitForRunToFinish(page, run)).toBe('completed');
  await expect(page.getByTestId('count-errors')).toHaveText('0');
  const accuracies = page.getByTestId('instruction-accuracies');
  for (const name of ['prompt_level_strict_acc', 'inst_level_strict_acc', 'prompt_level_loose_acc', 'inst_level_loose_acc']) {
    await expect(accuracies.getByRole('row').filter({ has: page.getByRole('cell', { name, exact: true }) })).toHaveCount(1);
  }
  await expect(accuracies).toContainText(' / 14');
  await expect(page.getByTestId('instruction-rows')).toContainText('startend:quotation');
  // A missed instruction is named in the answer's grade (folded under the answer).
  await expect(page.locator('table.results pre.output').filter({ hasText: /missed [a-z_]+:/ }).first())
    .toHaveText(/^followed \d of \d instructions; missed [a-z_]+:[a-z_]+/);
});
