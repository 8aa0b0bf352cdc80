//! `pmtx pool create | info | check | dump`.

use crate::units::{format_bytes, format_unix_time, parse_chunk_size, parse_size};
use crate::CliError;
use clap::{Args, Subcommand};
use pmtx_pm::{layout, BackendInfo, Direct, Mapping, PmOptions, Pool, PoolCheckReport, PoolError, PoolInfo};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `pmtx pool ...`
#[derive(Args, Debug)]
pub struct PoolArgs {
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Subcommand, Debug)]
enum PoolCommand {
    /// Create a new pool file.
    Create(CreateArgs),
    /// Print a pool's header, geometry, backend, durability, usage, roots,
    /// and its database: engine, protocol, catalog format, tables with their
    /// row counts and sizes.
    Info(InfoArgs),
    /// Verify a pool's header and allocator metadata (exit 1 if damaged).
    Check(CheckArgs),
    /// Print the rows of one table (keys and values as UTF-8 text where
    /// printable, else hex).
    Dump(DumpArgs),
}

/// `pmtx pool create`
#[derive(Args, Debug)]
struct CreateArgs {
    /// Pool file to create.
    path: PathBuf,
    /// Pool size: bytes or an integer with KiB, MiB, GiB, TiB.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    size: u64,
    /// Allocation chunk size: a power of two of at least 64KiB.
    #[arg(long, default_value = "2MiB", value_parser = parse_chunk_size)]
    chunk_size: u64,
    /// Replace an existing file at PATH (refused while a process holds the pool open).
    #[arg(long)]
    force: bool,
}

/// `pmtx pool info`
#[derive(Args, Debug)]
struct InfoArgs {
    /// Pool file.
    path: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Do not count rows. Counting opens the database, which (like any
    /// open) first recovers a pool that was not shut down cleanly; without
    /// counting, info only reads the file.
    #[arg(long)]
    no_rows: bool,
}

/// `pmtx pool dump`
#[derive(Args, Debug)]
struct DumpArgs {
    /// Pool file.
    path: PathBuf,
    /// Table name (`pmtx pool info` lists them).
    table: String,
    /// Print at most this many rows.
    #[arg(long)]
    limit: Option<usize>,
    /// Print keys and values as hex even when they are printable text.
    #[arg(long)]
    hex: bool,
}

/// `pmtx pool check`
#[derive(Args, Debug)]
struct CheckArgs {
    /// Pool file.
    path: PathBuf,
}

/// Runs `pmtx pool ...`.
pub fn run(args: PoolArgs) -> Result<(), CliError> {
    match args.command {
        PoolCommand::Create(args) => create(args),
        PoolCommand::Info(args) => info(args),
        PoolCommand::Check(args) => check(args),
        PoolCommand::Dump(args) => dump(args),
    }
}

fn create(args: CreateArgs) -> Result<(), CliError> {
    if args.size < layout::MIN_POOL_SIZE || layout::geometry(args.size, args.chunk_size).is_none() {
        let minimum = layout::MIN_POOL_SIZE.max(2 * args.chunk_size);
        return Err(CliError::usage(format!(
            "pool size {} is too small for chunks of {}: the minimum is {} ({minimum} bytes)",
            format_bytes(args.size),
            format_bytes(args.chunk_size),
            format_bytes(minimum)
        )));
    }
    if args.force {
        remove_existing(&args.path)?;
    }
    let pool =
        Pool::<Direct>::create(&args.path, args.size, args.chunk_size, &PmOptions::default()).map_err(|error| {
            match error {
                PoolError::AlreadyExists(_) => CliError::runtime(format!("{error} (use --force to replace it)")),
                other => other.into(),
            }
        })?;
    let info = pool.info();
    pool.close();
    let geometry = &info.geometry;
    println!("created pool {}", args.path.display());
    println!(
        "  size {} with {} chunks of {} (data at offset {})",
        format_bytes(geometry.size),
        geometry.chunk_count,
        format_bytes(geometry.chunk_size),
        geometry.data_offset
    );
    println!("  mapping {}; durability: {}", info.backend.mapping, info.backend.durability());
    Ok(())
}

/// `--force`: remove the file at `path`, unless it is a directory or a pool
/// some process holds open.
fn remove_existing(path: &Path) -> Result<(), CliError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(CliError::runtime(format!("{}: {error}", path.display()))),
    };
    if metadata.is_dir() {
        return Err(CliError::runtime(format!("{}: is a directory; --force only replaces files", path.display())));
    }
    if metadata.is_file() {
        if let Err(PoolError::Locked(_)) = Mapping::open_file(path) {
            return Err(CliError::runtime(format!(
                "{}: pool is open in another process; refusing to replace it",
                path.display()
            )));
        }
    }
    std::fs::remove_file(path).map_err(|error| CliError::runtime(format!("{}: cannot remove: {error}", path.display())))
}

/// Everything `pool info --json` prints.
#[derive(Serialize)]
struct InfoJson {
    path: String,
    file_bytes: u64,
    pool_id: String,
    creator: String,
    created_unix_seconds: u64,
    layout_version: u32,
    size_bytes: u64,
    requested_size_bytes: u64,
    chunk_size_bytes: u64,
    chunk_count: u64,
    data_offset: u64,
    chunks_used: u64,
    chunks_free_zero: u64,
    chunks_free_dirty: u64,
    bytes_used: u64,
    bytes_total: u64,
    clean_shutdown: bool,
    open_count: u64,
    backend: BackendJson,
    roots: Vec<RootJson>,
    /// The stored catalog; `None` for a pool that stores none.
    database: Option<DatabaseJson>,
}

/// What a pool's stored catalog says, with row counts if asked.
#[derive(Serialize)]
struct DatabaseJson {
    engine: String,
    protocol: String,
    catalog_format_version: u32,
    catalog_generation: u64,
    tables: Vec<TableJson>,
}

#[derive(Serialize)]
struct TableJson {
    name: String,
    primary_index: String,
    max_key_bytes: usize,
    max_value_bytes: usize,
    secondary_indexes: Vec<String>,
    /// Present rows; `None` with `--no-rows`.
    rows: Option<u64>,
    /// Bytes of their keys and values.
    key_bytes: Option<u64>,
    value_bytes: Option<u64>,
}

/// The backend part of reports (shared with `smoke`).
#[derive(Serialize)]
pub struct BackendJson {
    kind: String,
    mapping: String,
    dax: bool,
    flush_instruction: String,
    persistence_domain: String,
    msync: bool,
    latency_model: Option<String>,
    durability: String,
}

impl BackendJson {
    /// Describes `info`.
    pub fn new(info: &BackendInfo) -> Self {
        Self {
            kind: info.kind.to_string(),
            mapping: info.mapping.to_string(),
            dax: info.mapping == pmtx_pm::MappingKind::Dax,
            flush_instruction: info.flush_instruction.to_string(),
            persistence_domain: info.domain.to_string(),
            msync: info.msync,
            latency_model: info.latency.map(|model| model.name.to_string()),
            durability: info.durability().to_string(),
        }
    }
}

#[derive(Serialize)]
struct RootJson {
    name: String,
    value: u64,
}

fn inspect(path: &Path) -> Result<(PoolInfo, PoolCheckReport, u64), CliError> {
    let (info, report) = Pool::<Direct>::inspect(path, &PmOptions::default())?;
    let file_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(info.geometry.size);
    Ok((info, report, file_bytes))
}

fn engine_error(error: pmtx_engine::DbError) -> CliError {
    CliError::runtime(error.to_string())
}

/// Options that reopen the pool at `path` from its stored catalog for
/// inspection: stored secondary indexes get a placeholder key function,
/// since inspection runs no transaction and secondary indexes live in DRAM
/// only (rebuilt at every open).
fn inspection_options(path: &Path) -> Result<pmtx_engine::DbOptions, CliError> {
    let mut options = pmtx_engine::DbOptions::from_pool(path).map_err(engine_error)?;
    let indexes: Vec<(String, String)> = options
        .tables
        .iter()
        .flat_map(|table| table.secondaries.iter().map(|index| (table.name.clone(), index.name.clone())))
        .collect();
    for (table, index) in indexes {
        options = options.secondary_key(&table, &index, |_, _| Vec::new());
    }
    options.checkpoint_interval = None;
    Ok(options)
}

fn database_json(path: &Path, count_rows: bool) -> Result<Option<DatabaseJson>, CliError> {
    let Some(stored) = pmtx_engine::internals::pool_layout::read_stored_catalog(path).map_err(engine_error)? else {
        return Ok(None);
    };
    let mut tables: Vec<TableJson> = stored
        .tables
        .iter()
        .map(|table| TableJson {
            name: table.name.clone(),
            primary_index: match table.primary {
                pmtx_engine::PrimaryIndexKind::Ordered => "ordered".into(),
                pmtx_engine::PrimaryIndexKind::Hash => "hash".into(),
            },
            max_key_bytes: table.max_key_len,
            max_value_bytes: table.max_value_len,
            secondary_indexes: table.secondaries.iter().map(|index| index.name.clone()).collect(),
            rows: None,
            key_bytes: None,
            value_bytes: None,
        })
        .collect();
    if count_rows {
        let db = pmtx_engine::Database::open(inspection_options(path)?).map_err(engine_error)?;
        for (id, table) in tables.iter_mut().enumerate() {
            let (mut rows, mut key_bytes, mut value_bytes) = (0u64, 0u64, 0u64);
            db.for_each_row(pmtx_engine::TableId(id as u32), |key, value| {
                rows += 1;
                key_bytes += key.len() as u64;
                value_bytes += value.len() as u64;
            })
            .map_err(engine_error)?;
            (table.rows, table.key_bytes, table.value_bytes) = (Some(rows), Some(key_bytes), Some(value_bytes));
        }
        db.close().map_err(engine_error)?;
    }
    Ok(Some(DatabaseJson {
        engine: stored.engine.name().to_string(),
        protocol: stored.protocol.name().to_string(),
        catalog_format_version: stored.format_version,
        catalog_generation: stored.generation,
        tables,
    }))
}

fn info(args: InfoArgs) -> Result<(), CliError> {
    let (info, report, file_bytes) = inspect(&args.path)?;
    // The file facts are read before counting rows opens the database.
    let database = database_json(&args.path, !args.no_rows)?;
    let g = &info.geometry;
    if args.json {
        let json = InfoJson {
            path: args.path.display().to_string(),
            file_bytes,
            pool_id: format!("{:016x}", g.pool_id),
            creator: g.creator.clone(),
            created_unix_seconds: g.created_unix_seconds,
            layout_version: layout::LAYOUT_VERSION,
            size_bytes: g.size,
            requested_size_bytes: g.requested_size,
            chunk_size_bytes: g.chunk_size,
            chunk_count: g.chunk_count,
            data_offset: g.data_offset,
            chunks_used: info.chunks_used,
            chunks_free_zero: report.chunks_free_zero,
            chunks_free_dirty: report.chunks_free_dirty,
            bytes_used: info.chunks_used * g.chunk_size,
            bytes_total: g.chunk_count * g.chunk_size,
            clean_shutdown: info.was_clean_shutdown,
            open_count: info.open_count,
            backend: BackendJson::new(&info.backend),
            roots: info.roots.iter().map(|(name, value)| RootJson { name: name.clone(), value: *value }).collect(),
            database,
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let b = &info.backend;
    println!("pool {}", args.path.display());
    println!("  pool id           {:016x}", g.pool_id);
    println!("  creator           {}", g.creator);
    println!("  created           {}", format_unix_time(g.created_unix_seconds));
    println!("  layout version    {}", layout::LAYOUT_VERSION);
    println!("  size              {} ({} bytes; file {} bytes)", format_bytes(g.size), g.size, file_bytes);
    println!("  chunk size        {}", format_bytes(g.chunk_size));
    println!("  chunks            {} (data at offset {})", g.chunk_count, g.data_offset);
    println!(
        "  chunks used       {}/{} ({} of {}; free: {} zero, {} dirty)",
        info.chunks_used,
        g.chunk_count,
        format_bytes(info.chunks_used * g.chunk_size),
        format_bytes(g.chunk_count * g.chunk_size),
        report.chunks_free_zero,
        report.chunks_free_dirty
    );
    println!(
        "  clean shutdown    {}",
        if info.was_clean_shutdown { "yes" } else { "no (recovery runs at the next open)" }
    );
    println!("  open count        {}", info.open_count);
    println!("  mapping           {}", b.mapping);
    println!("  flush instruction {}", b.flush_instruction);
    println!("  persistence       {}", b.domain);
    println!("  msync             {}", if b.msync { "at every fence" } else { "off" });
    println!("  durability        {}", b.durability());
    if info.roots.is_empty() {
        println!("  roots             none");
    } else {
        println!("  roots             {}", info.roots.len());
        for (name, value) in &info.roots {
            println!("    {name:<48} {value:#018x}");
        }
    }
    match database {
        None => {
            println!("  database          none (no stored catalog: an empty pool, or one written by an older pmtx)")
        }
        Some(database) => {
            println!("  engine            {}", database.engine);
            println!("  protocol          {} (of the last open that changed the catalog)", database.protocol);
            println!(
                "  catalog           format version {}, generation {}",
                database.catalog_format_version, database.catalog_generation
            );
            println!("  tables            {}", database.tables.len());
            for table in &database.tables {
                let rows = match (table.rows, table.key_bytes, table.value_bytes) {
                    (Some(rows), Some(keys), Some(values)) => {
                        format!("{rows} rows, {} keys + {} values", format_bytes(keys), format_bytes(values))
                    }
                    _ => "rows not counted".to_string(),
                };
                let indexes = if table.secondary_indexes.is_empty() {
                    String::new()
                } else {
                    format!(", secondary {}", table.secondary_indexes.join(", "))
                };
                println!(
                    "    {:<24} {:<7} keys <= {} B, values <= {} B{indexes}: {rows}",
                    table.name, table.primary_index, table.max_key_bytes, table.max_value_bytes
                );
            }
        }
    }
    Ok(())
}

/// Text for a key or value: UTF-8 when every character is printable, else
/// hex.
fn show_bytes(bytes: &[u8], hex: bool) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !hex && !text.is_empty() && text.chars().all(|c| !c.is_control()) => format!("{text:?}"),
        _ => format!("0x{}", bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>()),
    }
}

fn dump(args: DumpArgs) -> Result<(), CliError> {
    let options = inspection_options(&args.path)?;
    let Some(position) = options.tables.iter().position(|table| table.name == args.table) else {
        let names: Vec<_> = options.tables.iter().map(|table| table.name.as_str()).collect();
        return Err(CliError::usage(format!(
            "pool {} has no table `{}` (its tables: {})",
            args.path.display(),
            args.table,
            names.join(", ")
        )));
    };
    let db = pmtx_engine::Database::open(options).map_err(engine_error)?;
    let limit = args.limit.unwrap_or(usize::MAX);
    let mut printed = 0usize;
    let mut total = 0usize;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut write_error = None;
    db.for_each_row(pmtx_engine::TableId(position as u32), |key, value| {
        total += 1;
        if printed < limit && write_error.is_none() {
            use std::io::Write;
            if let Err(error) = writeln!(out, "{}\t{}", show_bytes(key, args.hex), show_bytes(value, args.hex)) {
                write_error = Some(error);
            }
            printed += 1;
        }
    })
    .map_err(engine_error)?;
    drop(out);
    db.close().map_err(engine_error)?;
    if let Some(error) = write_error {
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(error.into());
        }
    }
    eprintln!("{printed} of {total} rows of table {}", args.table);
    Ok(())
}

fn check(args: CheckArgs) -> Result<(), CliError> {
    let (info, report, file_bytes) = inspect(&args.path)?;
    let g = &report.geometry;
    println!("checking pool {}", args.path.display());
    println!(
        "  header       ok: magic, layout version {}, checksum, geometry ({} = {} chunks of {} at offset {})",
        layout::LAYOUT_VERSION,
        format_bytes(g.size),
        g.chunk_count,
        format_bytes(g.chunk_size),
        g.data_offset
    );
    if file_bytes > g.size {
        println!("  file size    ok: {file_bytes} bytes ({} bytes beyond the pool are ignored)", file_bytes - g.size);
    } else {
        println!("  file size    ok: {file_bytes} bytes");
    }
    println!(
        "  chunk table  ok: {} entries ({} used, {} free-zero, {} free-dirty)",
        g.chunk_count, report.chunks_used, report.chunks_free_zero, report.chunks_free_dirty
    );
    println!("  root table   ok: {} valid roots of {} slots", report.roots, layout::ROOT_SLOTS);
    println!(
        "  shutdown     {}",
        if info.was_clean_shutdown {
            "clean"
        } else {
            "not clean (the last user did not close it; engine recovery runs at the next open)"
        }
    );
    println!("pool {} is consistent", args.path.display());
    Ok(())
}
