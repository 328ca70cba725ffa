// Quality control and the rater pool: a reviewer rejects a label and its item returns to the
// queue; a lead pauses a rater; an annotator labels three items from the keyboard alone; a lead
// sets the QC rates, makes an item gold and invites a rater who trains on it with feedback.
//
// The tests share one promotion-priority run whose items all go to humans (a grader that never
// decides, no judges, every label drawn for review), so its items come first in every queue.
import {
  expect,
  jsonl,
  launchReviewedRun,
  login,
  openQueue,
  openSessionAs,
  submitLogin,
  test,
  TINY_DATASET,
  uniqueName,
  waitForHydration,
} from './helpers';

test.describe.configure({ mode: 'serial' });

test('a reviewer rejects a label with a reason and the item returns to the queue', async ({ page, browser, browserLog }) => {
  await login(page, 'researcher');
  await launchReviewedRun(page, jsonl(TINY_DATASET), TINY_DATASET.length);

  // The lead has not labelled before (so holds no lease): the first item is a promotion one.
  const rater = await openSessionAs(browser, 'lead', browserLog);
  const labelled = (await openQueue(rater.page)).content;
  await rater.page.keyboard.press('2');
  await expect(rater.page.getByTestId('notice')).toHaveText('Label saved.');
  await rater.close();

  const reviewer = await openSessionAs(browser, 'reviewer', browserLog);
  await reviewer.page.goto('/review');
  await expect(reviewer.page.getByTestId('review-label')).toHaveText('lead said fail');
  await waitForHydration(reviewer.page);
  // Rejecting needs a reason: without one the decision is refused.
  await reviewer.page.keyboard.press('x');
  await expect(reviewer.page.getByTestId('notice')).toContainText('say why');
  await reviewer.page.keyboard.press('r');
  await reviewer.page.keyboard.type('the reply never answers the question');
  await reviewer.page.keyboard.press('Escape');
  await reviewer.page.keyboard.press('x');
  await expect(reviewer.page.getByTestId('notice')).toHaveText('Decision saved.');

  // Back in the queue: the reviewer (who may label too, and has labelled nothing) is offered
  // the reopened item first, as the oldest promotion item with a free slot.
  expect((await openQueue(reviewer.page)).content).toBe(labelled);
  await reviewer.close();
});

test('a lead pauses a rater, who then gets no items until resumed', async ({ page, browser, browserLog }) => {
  await login(page, 'lead');
  await page.goto('/raters');
  await waitForHydration(page);
  const row = page.getByTestId('rater-annotator1');
  await row.getByRole('button', { name: 'Pause' }).click();
  await expect(row.getByTestId('rater-status')).toHaveText('paused');

  const rater = await openSessionAs(browser, 'annotator1', browserLog);
  await rater.page.goto('/annotate');
  await expect(rater.page.getByRole('alert')).toContainText('paused');

  await row.getByRole('button', { name: 'Resume' }).click();
  await expect(row.getByTestId('rater-status')).toHaveText('active');
  await rater.page.goto('/annotate');
  await expect(rater.page.getByTestId('task').or(rater.page.getByTestId('queue-empty'))).toBeVisible();
  await rater.close();
});

test('an annotator labels three items with the keyboard alone', async ({ page }) => {
  await login(page, 'annotator2');
  let shown: string | null = (await openQueue(page)).claim;
  const labelled = new Set<string>();
  for (const key of ['1', '2', '1']) {
    expect(shown, 'the queue still has items').not.toBeNull();
    labelled.add(shown!);
    await page.keyboard.press(key);
    // The next item (or the empty-queue card) replaces the one just labelled.
    const next = page.getByTestId('task').or(page.getByTestId('queue-empty'));
    await expect(next).not.toHaveAttribute('data-claim', shown!);
    await expect(page.getByTestId('notice')).toHaveText('Label saved.');
    const task = page.getByTestId('task');
    shown = (await task.count()) > 0 ? await task.getAttribute('data-claim') : null;
  }
  expect(labelled.size).toBe(3);
});

test('a lead makes an item gold and invites a rater, who trains on it with feedback', async ({
  page,
  browser,
  browserLog,
}) => {
  await login(page, 'lead');
  // The lead's queue page: backlog, forecast and alerts are shown.
  await page.goto('/queue');
  await expect(page.getByTestId('backlog-tasks')).toHaveText(/^\d+$/);
  await expect(page.getByTestId('forecast')).not.toBeEmpty();
  await expect(page.getByTestId('alerts')).toBeVisible();
  await waitForHydration(page);
  // No gold for the other raters of this shared demo: the rate goes to 0 (trainees still get
  // gold items; that is what training is).
  const qc = page.getByTestId('qc-settings');
  await qc.getByLabel('Gold rate', { exact: false }).fill('0');
  await qc.getByLabel('Spot-check rate', { exact: false }).fill('12%');
  await qc.getByRole('button', { name: 'Save' }).click();
  // The page reloads its data after a save: the stored share comes back.
  await expect(qc.getByLabel('Spot-check rate', { exact: false })).toHaveAttribute('value', '0.12');
  // A bad rate is refused with a reason and changes nothing.
  await qc.getByLabel('Gold rate', { exact: false }).fill('lots');
  await qc.getByRole('button', { name: 'Save' }).click();
  await expect(page.getByRole('alert')).toContainText('the gold rate is a share');

  // The item at the head of the lead's queue becomes gold (the lead skips it first). Leads,
  // unlike raters, see the item's id.
  const headOfQueue = await openQueue(page);
  const taskId = (await page.getByTestId('item-id').textContent())!;
  expect(taskId).toMatch(/^\d+$/);
  await page.keyboard.press('s');
  await expect(page.getByTestId('notice')).toHaveText('Skipped.');
  await page.goto('/queue');
  await waitForHydration(page);
  const gold = page.getByTestId('gold');
  await gold.getByLabel('Item id').fill(taskId);
  await gold.getByLabel('Answer').selectOption('fail');
  await gold.getByLabel('Note for trainees').fill('The reply never states an answer.');
  await gold.getByRole('button', { name: 'Make gold' }).first().click();
  await expect(gold.getByTestId('gold-item').filter({ hasText: 'no answers yet' }).first()).toBeVisible();

  // Invite a rater who starts in training; the first password is shown once.
  await page.goto('/raters');
  await waitForHydration(page);
  const trainee = uniqueName('trainee');
  await page.getByText('Invite a rater').click();
  await page.getByLabel('Username').fill(trainee);
  await page.getByRole('button', { name: 'Invite' }).click();
  await expect(page.getByTestId('invited')).toContainText(trainee);
  const password = (await page.getByTestId('invited-password').textContent())!;
  expect(password).toMatch(/^[A-Za-z0-9]{16}$/);
  await expect(page.getByTestId(`rater-${trainee}`).getByTestId('rater-status')).toHaveText('in training');

  // The trainee signs in: a training banner, the gold item, and feedback after the label.
  const context = await browser.newContext();
  const rater = await context.newPage();
  await browserLog.watch(rater);
  await submitLogin(rater, trainee, password);
  // The first password was the lead's choice: the trainee chooses their own first.
  await expect(rater).toHaveURL(/\/account\/password$/);
  await expect(rater.getByTestId('must-change')).toBeVisible();
  await rater.getByLabel('Current password').fill(password);
  await rater.getByLabel(/^New password \(/).fill('trainee-own-password');
  await rater.getByLabel('New password again').fill('trainee-own-password');
  await rater.getByRole('button', { name: 'Change password' }).click();
  await expect(rater.getByTestId('password-changed')).toBeVisible();
  await expect(rater.getByTestId('whoami')).toHaveText(trainee);
  const trained = await openQueue(rater);
  expect(trained.content).toBe(headOfQueue.content);
  await expect(rater.getByTestId('item-id'), 'raters never see item ids').toHaveCount(0);
  await expect(rater.getByTestId('training')).toBeVisible();
  await rater.keyboard.press('1');
  await expect(rater.getByTestId('notice')).toHaveText(
    'Not quite: the answer is fail. The reply never states an answer. 0 of your latest 1 training labels are right.',
  );
  await context.close();

  // The lead sees the answer in the trainee's gold accuracy.
  await page.reload();
  await expect(page.getByTestId(`rater-${trainee}`).getByTestId('gold-accuracy')).toHaveText('0% (1)');
});
