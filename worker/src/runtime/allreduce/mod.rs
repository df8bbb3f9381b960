//! AllReduce over a spanning tree of workers (Agarwal et al., "A Reliable Effective
//! Terascale Linear Learning System", section 3; `../shared/papers/terascale-linear-
//! learning-allreduce.txt`): the runtime's [`Reduction::AllReduce`](linea_engine::algorithm::Reduction)
//! as an alternative to the master-centred range aggregation.
//!
//! * [`tree`]: the master's binary tree over the live workers (pure), rebuilt when
//!   membership changes or a reduce is restarted;
//! * [`chunks`]: how a vector is cut into pipelined chunks, the exact combine and the
//!   digest every worker reports of the total it received (pure);
//! * [`board`]: a worker's chunks of one reduce, which its peers wait on;
//! * [`node`]: one worker's part: pull each chunk from its children, add its own partial,
//!   offer the subtree's sum to its parent, then pull the total from its parent and offer
//!   it to its children — the two passes run at once, chunk by chunk.
//!
//! Sums are the engine's exact fixed-point i128 (engine::fixed), added with wrapping
//! integer additions, so the total is the same bits whatever the tree's shape.

pub mod board;
pub mod chunks;
pub mod node;
pub mod tree;
