// How a launched rank's threads share the host's cores with the other ranks on it: what
// `--bind cores` (the default) does and `--bind none` leaves to the scheduler. Measured on
// 2 ranks sharing 2 cores (docs/results.md, "DDP and SyncBatchNorm"), where the scheduler
// left both ranks idle for up to a 4 ms tick at a time: a Gloo I/O thread woken by the
// peer's message preempted its own rank's thread while that thread held the Gloo pair's
// lock, and Gloo's I/O loop then polls that lock until the tick preempts it.
// Linux only (sched_setaffinity, SCHED_BATCH).
#pragma once

#include <vector>

namespace dtrain::comm {

// This process's threads (ids as gettid() gives them).
std::vector<int> thread_ids();

// The cores this process may run on (its affinity: all of them, or what taskset left it),
// in ascending order; never empty (all hardware threads where the affinity is unreadable).
std::vector<int> allowed_cores();

// Pins every thread of this process, and so the threads they start later, to this local
// rank's share of the cores the process may use: `width` consecutive ones from
// local_rank * width. False, changing nothing, for a single local rank or where the local
// ranks times `width` exceed those cores (the ranks would share cores anyway).
bool bind_rank_to_cores(int local_rank, int local_world_size, int width);

// Runs the threads SCHED_BATCH: a wakeup of theirs no longer preempts the running thread
// (they run on an idle core at once, else at the next tick or when a thread blocks). For
// Gloo's I/O threads, whose wakeups preempted lock holders. Best effort: a thread that has
// exited or refuses is left as it is.
void run_as_batch(const std::vector<int>& thread_ids);

}  // namespace dtrain::comm
