//! Running a graph: the planner orders its nodes and gives tensors buffers that share memory
//! where their lifetimes allow ([`Plan`]); the executor binds a plan to a backend's buffers and a
//! parameter store, compiles it once and replays it ([`Executor`]). Above the graph, the backend
//! and the parameters, which it joins.

mod executor;
mod plan;

pub use executor::Executor;
pub use plan::{Plan, Slot};
