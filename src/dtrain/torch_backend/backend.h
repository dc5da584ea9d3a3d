// dtrain as a torch.distributed backend: `import dtrain` registers "dtrain", and
// dist.init_process_group("dtrain") then runs a user's own script (DDP, FSDP, pipelining,
// DTensor) over dtrain's transport: comm::Group's connections (striped, with openings, on
// long links), its all-reduce algorithms (DTRAIN_ALGO; by default the exchange between 2
// ranks on a long link, else the ring) and its wire check.
//
// Contracts (docs/python.md, "A torch.distributed backend"):
// - The group meets through the store torch hands the backend (no second rendezvous);
//   DTRAIN_* variables (comm/world.h; DTRAIN_ALGO for the all-reduce) set it up, alike on
//   every rank.
// - Collectives run in the order they were called, one at a time, on a thread of the
//   backend's; sends and receives are posted at once. Every operation returns a Work whose
//   future completes with its output tensors (DDP's default path waits on it).
// - CPU tensors of any dtype move as they are; CUDA and non-contiguous tensors are staged
//   through contiguous host copies. Sums are exact: no codec ever touches an all-reduce.
// - A receive from any source takes the first matching message of any rank (a striped
//   message needs the same streams to every peer). A sparse (COO) tensor's all-reduce is the
//   sum, coalesced, the same on every rank; other collectives refuse sparse tensors.
// - What it does not support (sparse tensors beyond the all-reduce's sum, several tensors
//   per call) is an error naming the operation, never a wrong result.
#pragma once

#include <chrono>
#include <string>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace dtrain::torch_backend {

// The backend of one process group: connects this rank to the group's others through
// `store` (collective over the group's ranks). Throws naming the cause where it cannot.
c10::intrusive_ptr<c10d::Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int size,
                                               std::chrono::milliseconds timeout);

// The all-reduce algorithm `backend` runs (comm/allreduce.h's names: DTRAIN_ALGO's, or its
// default for the group's links); throws std::invalid_argument where it is not dtrain's.
std::string all_reduce_algorithm(const c10::intrusive_ptr<c10d::Backend>& backend);

}  // namespace dtrain::torch_backend
