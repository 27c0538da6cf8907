//! The election: a pure state machine over Lease observations, and its driver against the API.
