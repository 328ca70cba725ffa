// Rater pay: a lead sets up a pay pool with an hourly rate and puts a rater in it; the rater
// labels and sees their own hours and pay; the lead reads the ledger and downloads it as CSV,
// which the rater may not.
import { expect, login, openQueue, openSessionAs, test, uniqueName } from './helpers';

test('a lead pays a rater by the hour and the rater sees their own pay', async ({
  page,
  browser,
  browserLog,
}) => {
  const pool = uniqueName('vendor');
  await login(page, 'lead');
  await page.goto('/pay');
  await page.getByLabel('New pool').fill(pool);
  await page.getByRole('button', { name: 'Create pool' }).click();
  const rateForm = page.getByTestId('rate-form');
  await expect(rateForm.getByRole('option', { name: pool })).toHaveCount(1);
  await rateForm.getByLabel('Pool').selectOption({ label: pool });
  await rateForm.getByLabel('Per').selectOption('hour');
  await rateForm.getByLabel('Rate').fill('30.00');
  await rateForm.getByLabel('Currency').fill('usd');
  await rateForm.getByRole('button', { name: 'Set rate' }).click();
  await expect(page.getByTestId('pay-rate').filter({ hasText: pool })).toContainText('30.00 USD per hour');

  // A bad rate is refused with its reason and nothing is stored.
  await rateForm.getByLabel('Rate').fill('30,00');
  await rateForm.getByRole('button', { name: 'Set rate' }).click();
  await expect(page.getByRole('alert')).toContainText('is not an amount like 12.50');
  await expect(page.getByTestId('pay-rate').filter({ hasText: pool })).toHaveCount(1);

  const assign = page.getByTestId('assign-form');
  await assign.getByLabel('Rater').selectOption({ label: 'annotator1' });
  await assign.getByLabel('Pool').selectOption({ label: pool });
  await assign.getByRole('button', { name: 'Assign' }).click();
  await expect(page.locator('[data-testid="rater-pool"][data-rater="annotator1"]')).toContainText(pool);

  // The rater labels an item and finds it on their own page, priced in the pool's currency.
  const rater = await openSessionAs(browser, 'annotator1', browserLog);
  await openQueue(rater.page);
  await rater.page.keyboard.press('1');
  await expect(rater.page.getByTestId('notice')).toHaveText('Label saved.');
  await rater.page.goto('/annotate/mine');
  const own = rater.page.getByTestId('own-pay').getByTestId('ledger-row').filter({ hasText: pool });
  await expect(own.first()).toContainText('USD');
  // The ledger is the pool's leads' business, not the rater's.
  const refused = await rater.page.request.get('/pay/ledger.csv');
  expect(refused.status()).toBe(403);
  await rater.close();

  // The lead's ledger has the rater's row at the pool's rate, and downloads as CSV.
  await page.reload();
  const row = page.locator('[data-testid="ledger-row"][data-rater="annotator1"]').filter({ hasText: pool });
  await expect(row.first()).toContainText('30.00 USD per hour');
  const href = await page.getByTestId('ledger-csv').getAttribute('href');
  const csv = await page.request.get(href!);
  expect(csv.status()).toBe(200);
  const text = await csv.text();
  expect(text.split('\n')[0]).toBe(
    'rater,period,period_start,pool,basis,rate,currency,labels,gold_answers,pair_answers,rejected_labels,untimed_answers,payable_hours,amount',
  );
  expect(text).toContain(`annotator1,`);
  expect(text).toContain(`,${pool},hour,30.00,USD,`);
});
