//! `sql-guard` (steering): refuses a `run_query` call whose `sql` has no
//! `WHERE` (case-insensitive) and tells the model to add one
//! (`is_error = true`, so it retries); every other call proceeds.
//!
//! The seed's `SqlGuard`, line for line. Like the seed, a `run_query` call
//! without a string `sql` argument is an error in the guard (the Python
//! handler raises): here it panics, and the host logs the fault and lets the
//! call proceed.

use toolgate_guest::{BeforeToolCallEvent, SteeringGuard, Verdict};

/// The steering guard.
struct SqlGuard;

impl SteeringGuard for SqlGuard {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        if event.tool_name == "run_query" {
            let sql = event.args["sql"]
                .as_str()
                .expect("run_query called without a string `sql` argument");
            if !sql.to_uppercase().contains("WHERE") {
                return Verdict::steer("Add a WHERE clause before running this query.");
            }
        }
        Verdict::proceed()
    }
}

toolgate_guest::export!(SqlGuard: steering);
