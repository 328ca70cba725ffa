//! Which runs a worker takes work from: strict priority classes, then weighted fair share
//! between teams, then an even split between a team's runs.
//!
//! Pure. The worker passes its own in-flight counts; because every worker balances what it
//! holds, the fleet as a whole is balanced without shared counters.

use crate::ids::RunId;
use crate::run::Priority;
use std::collections::HashMap;

/// A run with work that could be claimed, and what this worker already holds of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub run_id: RunId,
    pub priority: Priority,
    pub team: String,
    pub in_flight: usize,
}

/// Splits `slots` free request slots between candidates.
///
/// Only the highest priority class with candidates gets slots (a promotion run is never slowed
/// by ablations). Within it, slots go one at a time to the team with the lowest
/// (in-flight / weight), and within the team to its run with the fewest in flight, so a team's
/// 300-run sweep gets the same share as another team's single run.
pub fn allocate(
    slots: usize,
    candidates: &[Candidate],
    team_weight: impl Fn(&str) -> f64,
) -> Vec<(RunId, usize)> {
    let Some(top) = candidates.iter().map(|candidate| candidate.priority).max() else {
        return Vec::new();
    };
    let class: Vec<&Candidate> = candidates
        .iter()
        .filter(|candidate| candidate.priority == top)
        .collect();
    let mut run_load: HashMap<RunId, usize> =
        class.iter().map(|c| (c.run_id, c.in_flight)).collect();
    let mut team_load: HashMap<&str, usize> = HashMap::new();
    for candidate in &class {
        *team_load.entry(candidate.team.as_str()).or_default() += candidate.in_flight;
    }
    let mut granted: HashMap<RunId, usize> = HashMap::new();
    for _ in 0..slots {
        let team = team_load
            .iter()
            .min_by(|(a_team, a_load), (b_team, b_load)| {
                let a = **a_load as f64 / team_weight(a_team).max(f64::MIN_POSITIVE);
                let b = **b_load as f64 / team_weight(b_team).max(f64::MIN_POSITIVE);
                a.total_cmp(&b).then_with(|| a_team.cmp(b_team))
            })
            .map(|(team, _)| *team)
            .expect("the class has at least one team");
        let run = class
            .iter()
            .filter(|candidate| candidate.team == team)
            .min_by_key(|candidate| (run_load[&candidate.run_id], candidate.run_id))
            .expect("the team has at least one run")
            .run_id;
        *run_load.get_mut(&run).expect("known run") += 1;
        *team_load.get_mut(team).expect("known team") += 1;
        *granted.entry(run).or_default() += 1;
    }
    let mut allocation: Vec<(RunId, usize)> = granted.into_iter().collect();
    allocation.sort_unstable();
    allocation
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(run: i64, priority: i64, team: &str, in_flight: usize) -> Candidate {
        Candidate {
            run_id: RunId(run),
            priority: Priority::from_rank(priority).expect("a priority rank"),
            team: team.into(),
            in_flight,
        }
    }

    fn share(allocation: &[(RunId, usize)], runs: impl Fn(i64) -> bool) -> usize {
        allocation
            .iter()
            .filter(|(run, _)| runs(run.get()))
            .map(|(_, n)| n)
            .sum()
    }

    #[test]
    fn a_sweep_of_many_runs_does_not_starve_another_teams_single_run() {
        let mut candidates: Vec<Candidate> =
            (1..=300).map(|run| candidate(run, 1, "sweep", 0)).collect();
        candidates.push(candidate(1000, 1, "promo", 0));
        let allocation = allocate(100, &candidates, |_| 1.0);
        assert_eq!(share(&allocation, |run| run == 1000), 50);
        assert_eq!(share(&allocation, |run| run != 1000), 50);
        // The sweep's half is spread over its runs, not given to the first one.
        assert!(allocation
            .iter()
            .all(|(run, n)| *run == RunId(1000) || *n == 1));
    }

    #[test]
    fn higher_priority_classes_are_served_first() {
        let candidates = [
            candidate(1, 0, "a", 0),
            candidate(2, 2, "b", 0),
            candidate(3, 1, "c", 0),
        ];
        assert_eq!(allocate(10, &candidates, |_| 1.0), vec![(RunId(2), 10)]);
    }

    #[test]
    fn weights_and_current_load_set_the_split() {
        let candidates = [candidate(1, 1, "heavy", 0), candidate(2, 1, "light", 0)];
        let allocation = allocate(
            30,
            &candidates,
            |team| if team == "heavy" { 2.0 } else { 1.0 },
        );
        assert_eq!(allocation, vec![(RunId(1), 20), (RunId(2), 10)]);
        // A team already holding slots gets fewer new ones until the loads even out.
        let candidates = [candidate(1, 1, "a", 10), candidate(2, 1, "b", 0)];
        assert_eq!(allocate(10, &candidates, |_| 1.0), vec![(RunId(2), 10)]);
    }

    #[test]
    fn nothing_to_allocate() {
        assert!(allocate(5, &[], |_| 1.0).is_empty());
        assert!(allocate(0, &[candidate(1, 1, "a", 0)], |_| 1.0).is_empty());
    }
}
