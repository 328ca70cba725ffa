// The researcher's path: upload a dataset, define an eval, launch it, watch it finish.
import {
  openEvalForm,
  defineEval,
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
import type { Page } from '@playwright/test';

/** Uploads a file through the Datasets page's form, as a person would. */
async function uploadThroughForm(page: Page, name: string, fileName: string, content: string) {
  await page.goto('/datasets');
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('File').setInputFiles({
    name: fileName,
    mimeType: 'application/jsonl',
    buffer: Buffer.from(content),
  });
  await page.getByRole('button', { name: 'Upload' }).click();
}

test.beforeEach(async ({ page }) => {
  await login(page, 'researcher');
});

test('uploading a JSONL file shows its content hash and items', async ({ page }) => {
  const name = uniqueName('upload');
  await uploadThroughForm(page, name, 'tiny.jsonl', jsonl(TINY_DATASET));

  await expect(page).toHaveURL(/\/datasets\/\d+$/);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Dataset ${name}`);
  await expect(page.getByTestId('revision-hash')).toHaveText(/^sha256:[0-9a-f]{64}$/);
  const revision = page.getByRole('row').filter({ has: page.getByTestId('revision-hash') });
  await expect(revision).toContainText('tiny.jsonl');
  for (const [id, input, target] of TINY_DATASET) {
    const item = page.getByRole('row').filter({ hasText: id });
    await expect(item).toContainText(input);
    await expect(item).toContainText(target);
  }

  // The list shows it with its item count.
  await page.goto('/datasets');
  const listed = page.getByRole('row').filter({ has: page.getByRole('link', { name, exact: true }) });
  await expect(listed).toContainText('sha256:');
  await expect(listed.getByRole('cell').nth(2)).toHaveText(String(TINY_DATASET.length));
});

test('a malformed file is refused with the line at fault and nothing is stored', async ({ page }) => {
  const badJson = uniqueName('bad-json');
  await uploadThroughForm(
    page,
    badJson,
    'bad-json.jsonl',
    '{"id": "a", "input": "q1", "target": "t1"}\n{"id": "b", "input": \n{"id": "c", "input": "q3", "target": "t3"}\n',
  );
  await expect(page).toHaveURL(/\/datasets\?error=/);
  await expect(page.getByRole('alert')).toContainText('line 2: invalid JSON');

  const duplicate = uniqueName('duplicate-ids');
  await uploadThroughForm(
    page,
    duplicate,
    'dup.jsonl',
    jsonl([
      ['dup-1', 'q1', 't1'],
      ['dup-2', 'q2', 't2'],
      ['dup-1', 'q3', 't3'],
    ]),
  );
  await expect(page).toHaveURL(/\/datasets\?error=/);
  await expect(page.getByRole('alert')).toContainText('line 3: duplicate case id');
  await expect(page.getByRole('alert')).toContainText('dup-1');

  // Neither upload created a dataset.
  await page.goto('/datasets');
  await expect(page.getByRole('link', { name: 'qa-basic', exact: true })).toBeVisible();
  await expect(page.getByRole('link', { name: badJson })).toHaveCount(0);
  await expect(page.getByRole('link', { name: duplicate })).toHaveCount(0);
});

test('an eval defined in the browser runs to completion against the simulator', async ({ page }) => {
  const dataset = uniqueName('eval-data');
  // Questions no earlier test asked, so the answers come from the simulator (not the
  // generation cache) and the workers' load is sampled.
  const fresh = TINY_DATASET.map(([id, input, target]) => [id, `${input} (${dataset})`, target] as [string, string, string]);
  await uploadDatasetDirectly(page, dataset, jsonl(fresh));
  const evalName = uniqueName('tiny exact match');

  await defineEval(page, { name: evalName, dataset, repetitions: 1 });
  // The run page follows the run's progress events rather than polling for them.
  const events = page.waitForResponse((response) => /\/runs\/\d+\/events$/.test(response.url()));
  const runId = await launchRun(page, evalName, 'simulator/ckpt-a');

  await expect(page.getByRole('heading', { level: 1 })).toHaveText(
    `Run #${runId}: ${evalName} on simulator/ckpt-a`,
  );
  await waitForHydration(page);
  const stream = await events;
  expect(stream.url()).toContain(`/runs/${runId}/events`);
  expect(stream.headers()['content-type']).toBe('text/event-stream');
  await expect(page.getByTestId('run-status')).toHaveText('completed', { timeout: 45_000 });
  const total = TINY_DATASET.length; // one repetition
  await expect(page.getByTestId('run-progress')).toContainText(`${total} / ${total} results (100%)`);
  const counts = await Promise.all(
    ['count-pass', 'count-fail', 'count-uncertain', 'count-errors'].map(async (id) =>
      Number(await page.getByTestId(id).innerText()),
    ),
  );
  expect(counts.reduce((a, b) => a + b), `pass+fail+uncertain+errors ${counts}`).toBe(total);
  expect(counts[3], 'endpoint errors').toBe(0);
  await expect(page.locator('table.results tbody tr')).toHaveCount(total);
  // The workers' load samples: answers timed at the endpoint apart from the wait in Arbiter.
  const load = page.getByTestId('run-load');
  // The workers' last samples land a sample period after the answers; the page reads them then.
  await expect(load.getByTestId('load-times')).toContainText('mean at the endpoints', { timeout: 15_000 });
  await expect(load.getByTestId('load-times')).toContainText('mean wait in Arbiter');
  await expect(load.locator('svg')).toHaveCount(2);
});

test('a run against an unreachable endpoint fails and says why', async ({ page }) => {
  const checkpoint = uniqueName('unreachable');
  await page.goto('/checkpoints');
  await waitForHydration(page);
  await page.getByLabel('Name', { exact: true }).fill(checkpoint);
  await page.getByLabel('Endpoint URL (OpenAI-compatible)').fill('http://127.0.0.1:9/v1');
  await page.getByLabel('Served model name').fill('nothing');
  await page.getByRole('button', { name: 'Register' }).click();
  await expect(page.getByRole('row').filter({ hasText: checkpoint })).toContainText('http://127.0.0.1:9/v1');

  const dataset = uniqueName('unreachable-data');
  await uploadDatasetDirectly(page, dataset, jsonl(TINY_DATASET.slice(0, 2)));
  const evalName = uniqueName('unreachable eval');
  await defineEval(page, { name: evalName, dataset, repetitions: 1 });
  const runId = await launchRun(page, evalName, checkpoint);

  expect(await waitForRunToFinish(page, runId)).toBe('failed');
  await expect(page.getByTestId('run-error')).toContainText('could not connect');
  await expect(page.getByTestId('count-errors')).toHaveText('2');

  // Rolled back: the checkpoint is retracted with a reason, which its run's page shows.
  await page.goto('/checkpoints');
  await waitForHydration(page);
  const retraction = page.getByTestId(`retraction-${checkpoint}`);
  await page.getByLabel(`why ${checkpoint} is retracted`).fill('endpoint decommissioned');
  await retraction.getByRole('button', { name: 'Retract' }).click();
  await expect(retraction).toContainText('retracted: endpoint decommissioned');
  await page.goto(`/runs/${runId}`);
  await expect(page.getByTestId('run-retracted')).toContainText('endpoint decommissioned');
});

test('a structured suite is mapped, checked as typed, previewed and run', async ({ page }) => {
  const dataset = uniqueName('mmlu-style');
  const items = [
    { id: 'q1', question: 'Capital of France?', choices: ['Berlin', 'Paris', 'Rome', 'Madrid'], answer: 1, subject: 'geography' },
    { id: 'q2', question: 'Smallest prime?', choices: ['1', '2', '3', '4'], answer: 1, subject: 'math' },
    { id: 'q3', question: 'Largest planet?', choices: ['Jupiter', 'Mars', 'Venus', 'Earth'], answer: 0, subject: 'astronomy' },
  ];
  await uploadDatasetDirectly(page, dataset, items.map((item) => JSON.stringify(item)).join('\n') + '\n');
  const evalName = uniqueName('mmlu mapped');

  const form = await openEvalForm(page, evalName, dataset);
  // The dataset's fields are listed, and a field no item has is named as the researcher types.
  await expect(page.getByTestId('dataset-fields')).toContainText('question');
  await expect(page.getByTestId('dataset-fields')).toContainText('choices');
  // Under the default mapping the input is the field `input`, which these items lack.
  await expect(page.getByTestId('prompt-problem')).toContainText('has no field `input`');
  await form.getByText('System prompt, API, field mapping').click();
  await form.getByLabel('Input field').fill('question');
  await form.getByLabel('Target field').fill('answer');
  await form.getByLabel('Choices field').fill('choices');
  await form.getByLabel('Category field').fill('subject');
  const template = form.getByTestId('prompt-template');
  await template.fill('{{ question }} {{ explanation }}');
  await expect(page.getByTestId('prompt-problem')).toContainText('uses `explanation`, which the item does not have');
  await template.fill('{{ question }}\n{{ choices | lettered }}\nAnswer with the letter.');
  await form.getByLabel('System prompt (a template too)').fill('You answer {{ subject }} questions.');
  const sample = page.getByTestId('prompt-sample');
  await expect(sample).toContainText('[system]\nYou answer geography questions.');
  await expect(sample).toContainText('A. Berlin\nB. Paris');
  await expect(page.getByTestId('prompt-check')).toContainText('Target: B');
  await form.getByText('Few-shot exemplars').click();
  await form.getByLabel('Exemplars from').selectOption({ label: dataset });
  await form.getByLabel('Shots', { exact: true }).fill('1');
  // The simulator does not know these questions: exact match grades its replies as wrong
  // (where the multiple-choice grader would leave them to humans).
  await form.getByLabel('grader', { exact: true }).selectOption('normalised_match');
  await form.getByLabel('Repetitions').fill('3');
  await form.getByRole('button', { name: 'Define eval' }).click();
  await expect(evalRow(page, evalName)).toContainText('normalised_match@1');

  // The eval's page shows its parts and previews the exact request for an item.
  await evalRow(page, evalName).getByRole('link', { name: evalName }).click();
  await waitForHydration(page);
  await expect(page.getByTestId('eval-prompt-shape')).toContainText('choices ← choices');
  await page.getByTestId('preview-case').fill('q3');
  await page.getByLabel('Checkpoint').selectOption({ label: 'simulator/ckpt-a' });
  await page.getByRole('button', { name: 'Preview request' }).click();
  const body = page.getByTestId('preview-body');
  await expect(body).toContainText('"content": "You answer astronomy questions."');
  await expect(body).toContainText('Largest planet?');
  // One shot, drawn from the same dataset, never the item itself.
  await expect(body).toContainText('Answer with the letter. ');
  await expect(page.getByTestId('preview-key')).toHaveText(/^[0-9a-f]{64}$/);

  const runId = await launchRun(page, evalName, 'simulator/ckpt-a');
  expect(await waitForRunToFinish(page, runId)).toBe('completed');
  await expect(page.getByTestId('count-errors')).toHaveText('0');
  // Three samples per case: pass@k and pass^k, each saying how many cases and samples it
  // used (replies the grader could not decide are left to humans, not counted).
  const metrics = page.getByTestId('sample-metrics');
  await expect(metrics).toContainText('Samples used');
  // maj@k votes over the samples' extracted answers, for every k up to three.
  await expect(metrics.getByRole('row').filter({ hasText: 'maj@3' })).toHaveCount(1);
  for (const label of ['pass@1', 'pass^1']) {
    const cells = metrics.getByRole('row').filter({ hasText: label }).getByRole('cell');
    const cases = Number(await cells.nth(3).innerText());
    const short = Number(await cells.nth(5).innerText());
    expect(cases + short, `${label}: cases with and without enough samples`).toBe(3);
  }
});

test('a multi-turn suite is previewed, run turn after turn, and reported by turn', async ({ page }) => {
  // The demo's conversations: 8 of them, 3 with a third turn, a reference per turn.
  const evalName = 'qa-dialogues by turn';
  await page.goto('/evals');
  await waitForHydration(page);
  await evalRow(page, evalName).getByRole('link', { name: evalName }).click();
  await waitForHydration(page);
  await expect(page.getByTestId('eval-prompt-shape')).toContainText('input ← turns');
  await page.getByTestId('preview-case').fill('dlg-02');
  await page.getByLabel('Checkpoint').selectOption({ label: 'simulator/ckpt-a' });
  await page.getByRole('button', { name: 'Preview request' }).click();
  await expect(page.getByTestId('preview-body')).toContainText('Question: What is 12 * 11?');
  await expect(page.getByTestId('preview-body')).not.toContainText('What is 23 * 4?');
  await expect(page.getByTestId('preview-note')).toContainText('this is turn 1 of 3');

  const runId = await launchRun(page, evalName, 'simulator/ckpt-a');
  expect(await waitForRunToFinish(page, runId)).toBe('completed');
  // Each turn is its own result: 8 + 8 + 3 of them, each turn's row accounting for every
  // conversation that reached it (answered, undecided, errored or stopped).
  const turns = page.getByTestId('turn-results');
  await expect(turns.locator('tbody tr')).toHaveCount(3);
  for (const [index, conversations] of [8, 8, 3].entries()) {
    const cells = turns.locator('tbody tr').nth(index).getByRole('cell');
    await expect(cells.nth(0)).toHaveText(String(index + 1));
    const graded = Number((await cells.nth(3).innerText()).split('/')[1]);
    const uncertain = Number(await cells.nth(4).innerText());
    const errors = Number(await cells.nth(5).innerText());
    expect(graded + uncertain + errors, `turn ${index + 1}`).toBe(conversations);
  }
  // The results list each conversation's turns in order.
  const turnCells = page.getByTestId('result-turn');
  await expect(turnCells.first()).toHaveText('1');
  await expect(turnCells).toHaveCount(19);
});

test("the demo's multiple-choice and few-shot suites run against the simulator", async ({ page }) => {
  // Lettered choices, shuffled per item: the simulator answers with a letter, which the
  // multiple-choice grader reads. Three solved examples before each arithmetic question.
  for (const [evalName, items] of [
    ['qa-choice lettered, shuffled', 15],
    ['qa-arith 3-shot', 20],
  ] as const) {
    const runId = await launchRun(page, evalName, 'simulator/ckpt-a');
    expect(await waitForRunToFinish(page, runId)).toBe('completed');
    await expect(page.getByTestId('count-errors')).toHaveText('0');
    const passed = Number(await page.getByTestId('count-pass').innerText());
    const failed = Number(await page.getByTestId('count-fail').innerText());
    const uncertain = Number(await page.getByTestId('count-uncertain').innerText());
    expect(passed + failed + uncertain, evalName).toBe(items);
    // The simulated checkpoint is right four times in five (a few replies are unparseable).
    expect(passed, evalName).toBeGreaterThan(items / 2);
  }
});

test('a checkpoint served by Arbiter is planned, started, run and listed with its start-up time', async ({ page }) => {
  await page.goto('/checkpoints');
  await waitForHydration(page);
  const section = page.getByTestId('served-checkpoints');
  const checkpoint = uniqueName('served');
  await section.getByLabel('Checkpoint to serve').fill(checkpoint);
  await section.getByLabel('Model name to serve it under').fill('sim-ckpt-a');
  // A 70B model on two nodes of eight 80 GB GPUs: four GPUs a replica, four replicas.
  await section.locator('select[name="serve[engine]"]').selectOption('vllm');
  await section.getByLabel('Weights (path the engine loads)').fill('/models/70b');
  await section.getByLabel('Parameters (billions)').fill('70');
  await section.getByLabel('GPUs per node').fill('8');
  await section.getByLabel('GPU memory (GiB)').fill('80');
  await section.getByLabel('Nodes').fill('2');
  await section.getByRole('button', { name: 'Preview the plan' }).click();
  await expect(section.getByTestId('serving-plan')).toContainText('tp=4 dp=4');
  await expect(section.getByTestId('serving-plan')).toContainText('nothing was registered');

  // The demo's launcher starts simulator replicas: served for real, then run.
  await section.locator('select[name="serve[engine]"]').selectOption('simulator');
  await section.getByLabel('Weights (path the engine loads)').fill(`weights/${checkpoint}`);
  await section.getByLabel('Replicas (at most; CPU engines: how many)').fill('1');
  await section.getByRole('button', { name: 'Serve' }).click();
  await expect(section.getByTestId('serving-plan')).toContainText('Registered as checkpoint');
  await expect(section.getByTestId('serving-plan')).toContainText('its servers start with its first run');

  // Its first run starts its servers; the run is answered once they are healthy.
  const dataset = uniqueName('served-data');
  const fresh = TINY_DATASET.map(([id, input, target]) => [id, `${input} (${dataset})`, target] as [string, string, string]);
  await uploadDatasetDirectly(page, dataset, jsonl(fresh));
  const evalName = uniqueName('served eval');
  await defineEval(page, { name: evalName, dataset, repetitions: 1 });
  const runId = await launchRun(page, evalName, checkpoint);
  expect(await waitForRunToFinish(page, runId)).toBe('completed');
  await page.goto('/checkpoints');
  const launch = page.getByTestId('served-checkpoints').getByTestId(`launch-${checkpoint}`);
  await expect(launch).toContainText('tp=1 dp=1');
  await expect(launch.locator('td').nth(2)).toHaveText('healthy');
  // Start-up as measured: its total, then the wait for the launcher and the load.
  await expect(launch.locator('td').nth(5)).toHaveText(/^\d+(\.\d)? (s|min) \(\d+(\.\d)? (s|min) · \d+(\.\d)? (s|min)\)$/);
});
