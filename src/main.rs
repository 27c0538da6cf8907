//! `passmower-elector`: see the README, docs/reference/ and `passmower-elector --help`.

fn main() -> std::process::ExitCode {
    passmower_elector::cli::run()
}
