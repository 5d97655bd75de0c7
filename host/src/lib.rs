//! toolgate.
