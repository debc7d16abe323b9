//! What the commands print, built here so it is testable without the binary: each
//! command's documents (summary lines, tables and notes) from its typed result. The binary
//! prints them as a table or CSV, or prints the result itself as JSON.

pub mod calibrate;
pub mod import;
pub mod measure;
pub mod model;
pub mod report;
pub mod validate;
