//! `query-limit` (rewrite): a `run_query` call whose `sql` has no `LIMIT`
//! (case-insensitive) is rewritten to the same tool with `LIMIT 100`
//! appended (after dropping trailing whitespace and `;`), other arguments
//! kept; every other call passes through unchanged.

use toolgate_guest::serde_json::Value;
use toolgate_guest::{Rewrite, RewriteGuard, ToolCallDispatchEvent};

/// The rewrite guard.
struct QueryLimit;

/// The row cap appended to unbounded queries.
const LIMIT: &str = " LIMIT 100";

impl RewriteGuard for QueryLimit {
    fn on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Option<Rewrite> {
        if event.tool_name != "run_query" {
            return None;
        }
        let sql = event.args.get("sql")?.as_str()?;
        if sql.to_uppercase().contains("LIMIT") {
            return None;
        }
        let bounded = format!(
            "{}{LIMIT}",
            sql.trim_end_matches(|c: char| c.is_whitespace() || c == ';')
        );
        let mut args = event.args.clone();
        args["sql"] = Value::String(bounded);
        Some(Rewrite::new(event.tool_name, &args))
    }
}

toolgate_guest::export!(QueryLimit: rewrite);
