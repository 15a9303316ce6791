// `--features dhat-heap`: every allocation through dhat, so `herald bench
// --pipeline` can write a heap profile of its load (see
// `tooling::bench_pipeline`).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() -> std::process::ExitCode {
    herald::cli::main()
}
