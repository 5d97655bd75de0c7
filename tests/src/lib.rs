//! Paths to the guest programs the integration tests run.
//!
//! `build.rs` builds every guest once, for `wasm32-wasip2`: the example
//! guards in `plugins/rust` and the test programs in `tests/guests`. Each
//! constant below is the absolute path of one component (a copy in this
//! crate's `OUT_DIR`); [`PROGRAMS`] lists them all, and [`foreach_program!`]
//! expands a macro once per program so a program without a test can be made
//! a compile error:
//!
//! ```ignore
//! macro_rules! assert_test_exists {
//!     ($name:ident) => {
//!         #[allow(unused_imports, reason = "only checks the test exists")]
//!         use self::$name as _;
//!     };
//! }
//! toolgate_tests::foreach_program!(assert_test_exists);
//! ```
//!
//! | constant | seams | behaviour |
//! |---|---|---|
//! | [`SQL_GUARD`] | steering | `run_query` without `WHERE` → steer |
//! | [`QUERY_LIMIT`] | rewrite | `run_query` without `LIMIT` → `... LIMIT 100` |
//! | [`HIDE_ADMIN_TOOLS`] | routing | hides `admin_*` tools |
//! | [`NO_EMAIL`] | steering | `send_email` → cancel |
//! | [`RESULT_AUDIT`] | result | logs `tool=.. call=.. error=.. bytes=..` |
//! | [`HOSTILE`] | all four | misbehaves as `config.attack` (or the tool name) says |
//! | [`SCRIPTED`] | all five | answers as its config scripts |
//! | [`STEERING_ONLY`] | steering | always proceeds |
//! | [`REWRITE_ONLY`] | rewrite | never rewrites |
//! | [`MEMO`] | steering, rewrite, result | tries to carry state across calls; reports it and the event's `state` |
//! | [`ECHO`] | steering, rewrite | hands back the call's `args` as it read them |
//! | [`TOOL_CALL_LIMIT`] | steering, config | at most `run_limit` / `thread_limit` calls (state) |
//! | [`STATEFUL`] | steering, result | runs the state operations its config scripts |
//! | [`FETCHER`] | steering | makes the HTTP requests its config lists |
//! | [`RENDER`] | response | answers as its config scripts (append, keep, trap, grow) |
//! | [`OBSERVER`] | observe, steering | observes every lifecycle event as its config scripts (count, spin, trap, blow the state budget); steering says what it saw |
//!
//! The hostile and scripted programs document their configuration, and memo
//! and echo their answers, in
//! `tests/guests/{hostile,scripted,memo,echo,stateful,fetcher,render,observer}/src/lib.rs`.

include!(concat!(env!("OUT_DIR"), "/programs.rs"));
