fn main() -> std::process::ExitCode {
    herald::cli::main()
}
