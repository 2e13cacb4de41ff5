//! The `awa` binary: everything lives in the library's `cli` module.

fn main() {
    std::process::exit(awa_runtime::cli::main());
}
