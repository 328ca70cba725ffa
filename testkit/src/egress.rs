//! Test processes talk to simulators and stand-in servers on loopback, which the default
//! egress policy refuses: every entry point of the testkit installs a policy that allows
//! loopback (and `localhost`) before anything else reads one. Tests of the policy itself
//! build their own clients with the default policy instead of relying on this one.

use arbiter_engine::clients::egress::{install, EgressPolicy};

/// Loopback on any port, by address and by name.
pub const TEST_EGRESS_ALLOW: &str = "127.0.0.0/8, ::1, localhost";

/// Installs [`TEST_EGRESS_ALLOW`] as this process's policy (once; later calls are no-ops).
pub fn allow_loopback() {
    let policy = EgressPolicy::parse(TEST_EGRESS_ALLOW).expect("the test policy parses");
    if let Err(current) = install(policy) {
        panic!("this test process already has another egress policy: {current:?}");
    }
}
