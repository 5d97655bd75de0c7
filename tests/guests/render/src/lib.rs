//! `render`: a response guard (`on_response_render`) that answers as its
//! config scripts, first key that applies:
//!
//! - `"trap": true` — panics (a trap);
//! - `"grow": n` — returns `n` bytes of `x` (to meet the return limit);
//! - `"keep": true` — returns none (the content stays);
//! - `"append": "text"` — returns the `content` it was given followed by
//!   `text`, so a chain shows what each guard saw;
//! - otherwise — returns `"<original_content>|<model>|<node_name>|<iteration_index>|<run_id>"`.

use toolgate_guest::{ResponseGuard, ResponseRenderEvent};

/// The guard.
struct Render;

impl ResponseGuard for Render {
    fn on_response_render(event: ResponseRenderEvent) -> Option<String> {
        let config = toolgate_guest::config();
        if config["trap"] == true {
            panic!("render: scripted trap");
        }
        if let Some(n) = config["grow"].as_u64() {
            return Some("x".repeat(usize::try_from(n).unwrap_or(0)));
        }
        if config["keep"] == true {
            return None;
        }
        if let Some(text) = config["append"].as_str() {
            return Some(format!("{}{text}", event.content));
        }
        Some(format!(
            "{}|{}|{}|{}|{}",
            event.original_content,
            event.model,
            event.node_name,
            event.iteration_index,
            event.run_id
        ))
    }
}

toolgate_guest::export!(Render: response);
