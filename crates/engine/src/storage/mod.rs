//! Where rows live: DRAM rows and records ([`record`]), tables of rows with
//! their indexes, scans and reclamation ([`table`]), `mmdb`'s volatile NVM
//! region (`nvm_tuples`), and Zen's PM tuple heap with its DRAM Met-Cache
//! (`zen`); plus the storage-neutral view of a commit's writes that the
//! durability schemes encode ([`commit_view`]).
//!
//! Storage imports only the base modules and `index`: nothing here knows
//! the engine, its options, concurrency control or durability (each part
//! takes a small config built in `engines/`).

pub mod commit_view;
pub(crate) mod nvm_tuples;
pub(crate) mod pm_home;
pub mod record;
pub mod request;
pub mod table;
pub(crate) mod zen;
