//! The example `sql-guard` (plugins/rust/sql-guard) as an Extism plugin: the
//! same check, line for line, on the event as JSON text. Refuses a
//! `run_query` call whose `sql` has no `WHERE` (case-insensitive) and asks
//! the model to add one; every other call proceeds.

use extism_pdk::{FnResult, Json, plugin_fn};
use serde::{Deserialize, Serialize};

/// The parts of a before-tool-call event the check reads.
#[derive(Deserialize)]
struct BeforeToolCallEvent {
    tool_name: String,
    #[serde(default)]
    args: serde_json::Map<String, serde_json::Value>,
}

/// What the guard answers: proceed, or steer with a message for the model.
#[derive(Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
enum Verdict {
    Proceed,
    Steer { message: String },
}

/// The steering hook, as toolgate's guest SDK exports it.
#[plugin_fn]
pub fn on_before_tool_call(Json(event): Json<BeforeToolCallEvent>) -> FnResult<Json<Verdict>> {
    if event.tool_name == "run_query" {
        let sql = event.args["sql"]
            .as_str()
            .expect("run_query called without a string `sql` argument");
        if !sql.to_uppercase().contains("WHERE") {
            return Ok(Json(Verdict::Steer {
                message: "Add a WHERE clause before running this query.".into(),
            }));
        }
    }
    Ok(Json(Verdict::Proceed))
}
