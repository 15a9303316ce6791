//! Tooling: what measures and tortures Herald rather than runs it.
//!
//! The benchmarks behind `herald bench` ([`bench`]: the drain with one
//! worker in process; [`bench_instances`]: N `herald serve` processes;
//! [`bench_pipeline`]: the API, planner and worker under load;
//! [`bench_stream`]: the inbox stream under many connections), [`cluster`]
//! (several `herald serve` processes on one database, killed and restarted
//! at will, and the SQL audit of what they did, for the chaos and fault
//! tests), `herald demo` ([`demo`]) and the fuzz targets' shared entry
//! points (`fuzzing`). Nothing on the delivery path depends on this module.

pub mod bench;
pub mod bench_fanout;
pub mod bench_instances;
pub mod bench_messaging;
pub mod bench_pipeline;
pub mod bench_push;
pub mod bench_stream;
pub mod cluster;
pub mod demo;
#[doc(hidden)]
pub mod fuzzing;
pub mod push_receiver;
