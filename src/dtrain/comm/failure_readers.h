// A failing rank that serves the rendezvous store (rank 0 of a world) keeps serving it a
// moment after its error: the ranks its failure cascades to read that error there to name
// the rank where the cascade began, and a process that left at once took it with it.
#pragma once

#include <chrono>

namespace dtrain::comm {

// Called once the failure has been printed and the failed groups released (their connections
// closed, so a peer still waiting on this rank fails now rather than at its timeout): waits
// until every other rank of the failed group but one (the dead peer, which reads nothing) has
// read what it needed from the store, or `limit` passes. Returns at once where no group of
// this process failed while it served the store.
void serve_failure_readers(std::chrono::milliseconds limit);

}  // namespace dtrain::comm
