//! Costs of the persistence primitives, the numbers behind the media model
//! (docs/media-model.md):
//!
//! * `persist_64B_line/<instr>`: 64 B store + flush + fence, one line per
//!   persist, for every flush instruction this CPU has (CPUID);
//! * `batch_8_lines_one_fence/<instr>`: 8 consecutive lines stored and
//!   flushed under one fence (divide by 8 for the cost per line);
//! * `non_temporal/<size>`: non-temporal copy of 64 B, 256 B, 4 KiB + fence,
//!   and 8 x 64 B non-temporal lines under one fence;
//! * `fence_alone`: one fence with nothing pending;
//! * `emulated_optane/<pattern>`, `emulated_simple/<pattern>`: one line
//!   persisted on the emulated backend with the `optane` media model and
//!   with the per-line `simple` model, at consecutive versus random lines.
//!
//! Pools live in anonymous memory (the costs are those of DRAM behind the
//! cache; there is no persistent memory here). Each benchmark measures for
//! 2 s after a 0.5 s warm-up, so the whole run takes about a minute:
//! `cargo bench -p pmtx-pm --bench primitives`.

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use pmtx_pm::{ChunkOwner, CpuFeatures, Direct, Emulated, FlushInstruction, LatencyModel, PmBackend, PmOptions, Pool};
use rand::{Rng, SeedableRng};
use std::time::Duration;

const POOL_SIZE: u64 = 16 << 20;
const CHUNK_SIZE: u64 = 2 << 20;
/// Lines are written round-robin over this window of the chunk, larger than
/// L1/L2 so a line is not trivially hot, small enough to stay in L3.
const WINDOW: u64 = 1 << 20;
const LINE: u64 = 64;

/// A pool with one allocated, pre-faulted chunk; returns it and the chunk's offset.
fn pool<B: PmBackend>(options: &PmOptions) -> (Pool<B>, u64) {
    let pool = Pool::<B>::create_in_memory(POOL_SIZE, CHUNK_SIZE, options).expect("in-memory pool");
    let chunk = pool.allocate_chunk(ChunkOwner::new(1).expect("owner"), true).expect("chunk");
    let base = pool.chunk_offset(chunk);
    pool.backend().write(base, &vec![1u8; CHUNK_SIZE as usize]);
    pool.backend().persist(base, CHUNK_SIZE);
    (pool, base)
}

fn available_instructions() -> Vec<FlushInstruction> {
    let cpu = CpuFeatures::detect();
    let mut instructions = Vec::new();
    if cpu.clwb {
        instructions.push(FlushInstruction::Clwb);
    }
    if cpu.clflushopt {
        instructions.push(FlushInstruction::Clflushopt);
    }
    instructions.push(FlushInstruction::Clflush);
    instructions
}

fn configure(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
}

fn direct_options(instruction: FlushInstruction) -> PmOptions {
    PmOptions { flush_instruction: Some(instruction), ..PmOptions::default() }
}

fn persist_single_line(c: &mut Criterion) {
    let mut group = c.benchmark_group("persist_64B_line");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));
    let data = [0xA5u8; LINE as usize];
    for instruction in available_instructions() {
        let (pool, base) = pool::<Direct>(&direct_options(instruction));
        let backend = pool.backend();
        let mut cursor = 0u64;
        group.bench_function(instruction.to_string(), |b| {
            b.iter(|| {
                let offset = base + cursor;
                backend.write(offset, &data);
                backend.flush(offset, LINE);
                backend.fence();
                cursor = (cursor + LINE) % WINDOW;
            })
        });
    }
    group.finish();
}

fn batched_lines(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_8_lines_one_fence");
    configure(&mut group);
    group.throughput(Throughput::Elements(8));
    let data = [0x5Au8; 8 * LINE as usize];
    for instruction in available_instructions() {
        let (pool, base) = pool::<Direct>(&direct_options(instruction));
        let backend = pool.backend();
        let mut cursor = 0u64;
        group.bench_function(instruction.to_string(), |b| {
            b.iter(|| {
                let offset = base + cursor;
                backend.write(offset, &data);
                backend.flush(offset, 8 * LINE);
                backend.fence();
                cursor = (cursor + 8 * LINE) % WINDOW;
            })
        });
    }
    group.finish();
}

fn non_temporal(c: &mut Criterion) {
    let mut group = c.benchmark_group("non_temporal");
    configure(&mut group);
    let (pool, base) = pool::<Direct>(&PmOptions::default());
    let backend = pool.backend();
    let data = vec![0x3Cu8; 4096];
    for (name, size) in [("64B", 64u64), ("256B", 256), ("4KiB", 4096)] {
        let mut cursor = 0u64;
        group.throughput(Throughput::Bytes(size));
        group.bench_function(name, |b| {
            b.iter(|| {
                let offset = base + cursor;
                backend.write_non_temporal(offset, &data[..size as usize]);
                backend.fence();
                cursor = (cursor + size) % WINDOW;
            })
        });
    }
    let mut cursor = 0u64;
    group.throughput(Throughput::Elements(8));
    group.bench_function("8x64B_one_fence", |b| {
        b.iter(|| {
            for _ in 0..8 {
                backend.write_non_temporal(base + cursor, &data[..LINE as usize]);
                cursor = (cursor + LINE) % WINDOW;
            }
            backend.fence();
        })
    });
    group.finish();
}

fn fence_alone(c: &mut Criterion) {
    let mut group = c.benchmark_group("fence");
    configure(&mut group);
    let (pool, _) = pool::<Direct>(&PmOptions::default());
    let backend = pool.backend();
    group.bench_function("fence_alone", |b| b.iter(|| backend.fence()));
    group.finish();
}

fn emulated_optane(c: &mut Criterion) {
    emulated(c, "emulated_optane", LatencyModel::OPTANE);
}

fn emulated_simple(c: &mut Criterion) {
    emulated(c, "emulated_simple", LatencyModel::SIMPLE);
}

/// One persisted line, sequential and random, under `model`.
fn emulated(c: &mut Criterion, name: &str, model: LatencyModel) {
    let mut group = c.benchmark_group(name);
    configure(&mut group);
    group.throughput(Throughput::Elements(1));
    let options = PmOptions { latency: model, ..PmOptions::default() };
    let (pool, base) = pool::<Emulated>(&options);
    let backend = pool.backend();
    let data = [0x77u8; LINE as usize];
    let mut cursor = 0u64;
    group.bench_function("sequential_line", |b| {
        b.iter(|| {
            let offset = base + cursor;
            backend.write(offset, &data);
            backend.persist(offset, LINE);
            cursor = (cursor + LINE) % CHUNK_SIZE;
        })
    });
    // Random lines of the whole chunk: consecutive picks almost never share
    // or neighbour a 256 B block, so each is a new stream for the model.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let offsets: Vec<u64> = (0..4096).map(|_| base + rng.gen_range(0..CHUNK_SIZE / LINE) * LINE).collect();
    let mut next = 0usize;
    group.bench_function("random_line", |b| {
        b.iter(|| {
            let offset = offsets[next];
            backend.write(offset, &data);
            backend.persist(offset, LINE);
            next = (next + 1) % offsets.len();
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    persist_single_line,
    batched_lines,
    non_temporal,
    fence_alone,
    emulated_optane,
    emulated_simple
);
criterion_main!(benches);
