//! Paths to guest programs built for the tests.
