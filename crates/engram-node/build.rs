//! Links the module the way Node.js loads it.

fn main() {
    napi_build::setup();
}
