//! `passmower-elector`: see the README and `passmower-elector --help`.

fn main() -> std::process::ExitCode {
    passmower_elector::cli::run()
}
