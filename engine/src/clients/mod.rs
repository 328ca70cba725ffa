//! Clients of the outside world: model endpoints ([`model`]) and mail ([`mail`]).

pub mod mail;
pub mod model;
