//! No code: this crate only asks for dependency features, so that the builds of the test suite
//! (the Rust tests, the Python wheel, the Node module) compile each dependency once. Why and how
//! to keep it current: this crate's `Cargo.toml`.
