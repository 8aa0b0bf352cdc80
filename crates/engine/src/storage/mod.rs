//! Where rows live: DRAM rows and records ([`record`]), tables of rows with
//! their indexes, scans and reclamation ([`table`]), and Zen's PM tuple heap
//! with its DRAM Met-Cache (`zen`).

pub mod commit_view;
pub(crate) mod nvm_tuples;
pub mod record;
pub mod table;
pub(crate) mod zen;
