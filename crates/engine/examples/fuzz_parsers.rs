//! The long fuzzing run of the persistent-structure parsers (see
//! `tests/fuzz_parsers.rs`): every target, `--iterations` mutations each
//! (default 10^6), from `--seed`; prints executions, distinct outcomes and
//! time per target, and exits with a panic message (saving the input under
//! `target/fuzz-crashes/`) if a parser panics.
//!
//! ```text
//! cargo run --release -p pmtx-engine --example fuzz_parsers -- --iterations 1000000 [--seed N] [--target log]
//! ```

#[path = "../tests/fuzz_support/mod.rs"]
mod fuzz_support;

fn main() {
    let mut iterations = 1_000_000u64;
    let mut seed = 0x5EEDu64;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match arg.as_str() {
            "--iterations" => iterations = value("--iterations").parse().expect("--iterations: a number"),
            "--seed" => seed = value("--seed").parse().expect("--seed: a number"),
            "--target" => only = Some(value("--target")),
            other => {
                eprintln!("usage: fuzz_parsers [--iterations N] [--seed N] [--target pool|log|checkpoint|heap|wbl] ({other}?)");
                std::process::exit(2);
            }
        }
    }
    for (index, target) in fuzz_support::TARGETS.iter().enumerate() {
        if only.as_deref().is_some_and(|name| name != target.name) {
            continue;
        }
        let started = std::time::Instant::now();
        let report = fuzz_support::run(target, iterations, seed.wrapping_add(index as u64));
        println!(
            "fuzz {:<10} {:>10} executions, {:>4} distinct outcomes, {:>4} inputs in the pool, {:.1} s, no panic",
            target.name,
            report.executions,
            report.outcomes,
            report.pool,
            started.elapsed().as_secs_f64()
        );
    }
}
